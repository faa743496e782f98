"""The shipped model: its integrity check, each refusal's reason and line, and its vectors.

These run on the real model that `nox -s fetch_model` puts in the plugin (the tests
session fetches it first). The reference vectors in tests/data/ come from a
sentence-transformers-style torch pipeline on the official safetensors weights;
`python -m tests.test_model` rewrites them (needs torch and the fetch cache).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from squirrel_mcp_embeddings import embedder as embedder_module
from squirrel_mcp_embeddings.embedder import Embedder, load
from squirrel_mcp_embeddings.integrity import (
    MANIFEST_NAME,
    PACKAGED_MODEL_DIR,
    ModelNotLoaded,
    read_checked,
    read_manifest,
    status_line,
)
from tests.conftest import needs_model

# Every test here reads, loads or copies the fetched model files.
pytestmark = needs_model
ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(__file__).parent / "data" / "reference_vectors.json"
SHIPPED_MANIFEST = ROOT / "model" / "all-MiniLM-L6-v2" / MANIFEST_NAME
PACKAGED_MANIFEST = PACKAGED_MODEL_DIR / MANIFEST_NAME
READY = "memory: local embeddings ready"


def not_loaded(detail: str) -> str:
    return f"memory: local embeddings were not loaded ({detail}); memory search is lexical only"


def import_fetch() -> ModuleType:
    """model/fetch.py, imported by path (it is a build script, not a package)."""
    spec = importlib.util.spec_from_file_location("squirrel_fetch", ROOT / "model" / "fetch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model() -> Embedder:
    """The packaged model, loaded once for the vector tests."""
    assert PACKAGED_MANIFEST.is_file(), "no packaged model: run `nox -s fetch_model` first"
    return load()


@pytest.fixture
def model_copy(tmp_path: Path) -> Path:
    """A model directory of links to the packaged files; tests replace the one they spoil."""
    directory = tmp_path / "model"
    directory.mkdir()
    for path in PACKAGED_MODEL_DIR.iterdir():
        (directory / path.name).symlink_to(path)
    return directory


def replace(directory: Path, name: str, data: bytes) -> None:
    """Put data in place of the link `name` (never writing through it to the package)."""
    (directory / name).unlink()
    (directory / name).write_bytes(data)


def refusal(**kwargs: Any) -> ModelNotLoaded:
    with pytest.raises(ModelNotLoaded) as caught:
        load(**kwargs)
    return caught.value


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


# Integrity: every refusal has its reason, its file and its line.


def test_good_model_is_ready(model: Embedder) -> None:
    assert model.manifest.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert (model.manifest.min_similarity, model.manifest.semantic_span) == (0.35, 0.03)
    assert status_line(None) == READY


@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json"])
def test_flipped_byte_is_integrity(model_copy: Path, name: str) -> None:
    data = bytearray((PACKAGED_MODEL_DIR / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    replace(model_copy, name, bytes(data))
    error = refusal(directory=model_copy)
    assert (error.reason, error.file) == ("integrity", name)
    assert status_line(error) == not_loaded(f"integrity: {name}")


def test_truncated_file_is_integrity(model_copy: Path) -> None:
    replace(model_copy, "model.onnx", (PACKAGED_MODEL_DIR / "model.onnx").read_bytes()[:-1])
    assert status_line(refusal(directory=model_copy)) == not_loaded("integrity: model.onnx")


def test_missing_file_is_missing(model_copy: Path) -> None:
    (model_copy / "tokenizer.json").unlink()
    error = refusal(directory=model_copy)
    assert (error.reason, error.file) == ("missing", "tokenizer.json")
    assert status_line(error) == not_loaded("missing: tokenizer.json")


def manifest_data() -> dict[str, Any]:
    # The checked-in manifest the fetch copies into the plugin: readable before any fetch,
    # so the parameters below are built even where the model is absent (the tests skip).
    data: dict[str, Any] = json.loads(SHIPPED_MANIFEST.read_text())
    return data


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        json.dumps({**manifest_data(), "files": [{"name": "model.onnx", "size": None, "sha256": None}]}),
        json.dumps({**manifest_data(), "dimensions": "384"}),
        json.dumps({**manifest_data(), "pooling": "cls"}),
        json.dumps({**manifest_data(), "tokenizer": "vocab.txt"}),
        json.dumps(
            {
                **manifest_data(),
                "files": [*manifest_data()["files"], {"name": "../x", "size": 1, "sha256": "0" * 64}],
            }
        ),
    ],
    ids=["unparsable", "not-an-object", "null-hash", "wrong-type", "other-pooling", "unlisted-file", "path"],
)
def test_wrong_manifest_is_manifest(tmp_path: Path, text: str) -> None:
    manifest = tmp_path / MANIFEST_NAME
    manifest.write_text(text)
    error = refusal(manifest_path=manifest, directory=PACKAGED_MODEL_DIR)
    assert (error.reason, error.file) == ("manifest", MANIFEST_NAME)
    assert status_line(error) == not_loaded(f"manifest: {MANIFEST_NAME}")


def test_absent_manifest_and_unpinned_gte_small_are_manifest(tmp_path: Path) -> None:
    assert refusal(manifest_path=tmp_path / MANIFEST_NAME).reason == "manifest"
    # gte-small's manifest cannot be pinned from here (null hashes): never trusted.
    error = refusal(manifest_path=ROOT / "model" / "gte-small" / MANIFEST_NAME, directory=PACKAGED_MODEL_DIR)
    assert (error.reason, error.file) == ("manifest", MANIFEST_NAME)


def test_manifest_hash_that_differs_is_integrity(tmp_path: Path) -> None:
    data = manifest_data()
    data["files"] = [
        {**entry, "sha256": "0" * 64} if entry["name"] == "model.onnx" else entry for entry in data["files"]
    ]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    error = refusal(manifest_path=tmp_path / MANIFEST_NAME, directory=PACKAGED_MODEL_DIR)
    assert (error.reason, error.file) == ("integrity", "model.onnx")


def test_model_dir_variable_goes_through_the_same_check(
    model_copy: Path, monkeypatch: pytest.MonkeyPatch, model: Embedder
) -> None:
    monkeypatch.setenv("SQUIRREL_MEMORY_MODEL_DIR", str(model_copy))
    loaded = load()
    np.testing.assert_allclose(loaded.embed(["food allergies"]), model.embed(["food allergies"]), atol=1e-6)
    replace(model_copy, "tokenizer.json", b"{}")
    assert status_line(refusal()) == not_loaded("integrity: tokenizer.json")
    (model_copy / "model.onnx").unlink()
    assert status_line(refusal()) == not_loaded("missing: model.onnx")


def test_file_swapped_after_the_check_is_never_loaded(
    model_copy: Path, monkeypatch: pytest.MonkeyPatch, model: Embedder
) -> None:
    """Between the check and the runtime start, both files are replaced on disk: the runtime still
    gets the checked bytes, so the model loads and gives the same vectors."""
    import onnxruntime

    def check_then_swap(manifest: Any, directory: Path) -> dict[str, bytes]:
        checked = read_checked(manifest, directory)
        replace(directory, "model.onnx", b"not a model")
        replace(directory, "tokenizer.json", b"not a tokenizer")
        return checked

    monkeypatch.setattr(embedder_module, "read_checked", check_then_swap)
    loaded = load(directory=model_copy)
    assert (model_copy / "model.onnx").read_bytes() == b"not a model"
    with pytest.raises(Exception, match=r"(?i)protobuf|parse|load"):
        onnxruntime.InferenceSession(str(model_copy / "model.onnx"))  # what a path-based loader would get
    texts = ["food allergies", "Is allergic to peanuts"]
    np.testing.assert_array_equal(loaded.embed(texts), model.embed(texts))


@pytest.mark.skipif(sys.platform != "linux", reason="sealed anonymous files are Linux's")
def test_the_runtime_reads_a_sealed_copy_of_the_checked_bytes() -> None:
    """The runtime gets a path to the checked bytes, which nobody can change any more, and
    the caller's dict no longer holds them (so they are not kept alive twice)."""
    seen: dict[str, bytes] = {}

    class Runtime:
        @staticmethod
        def InferenceSession(path: str, sess_options: object, providers: list[str]) -> str:
            seen["read"] = Path(path).read_bytes()
            descriptor = os.open(path, os.O_RDWR)
            try:
                with pytest.raises(PermissionError):
                    os.write(descriptor, b"swapped")
            finally:
                os.close(descriptor)
            return "session"

    files = {"model.onnx": b"the checked bytes", "tokenizer.json": b"{}"}
    assert embedder_module.start_session(Runtime, files, "model.onnx", None) == "session"  # type: ignore[arg-type]
    assert seen["read"] == b"the checked bytes" and files == {"tokenizer.json": b"{}"}


def test_unloadable_runtime_is_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import onnxruntime` raise ImportError, as a platform
    # without a runtime binary (an Intel Mac) would.
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    error = refusal()
    assert (error.reason, error.file) == ("runtime", None)
    assert status_line(error) == not_loaded("runtime")


def test_checked_file_the_runtime_cannot_run_is_runtime(model_copy: Path, tmp_path: Path) -> None:
    """A manifest pinning a file that is not a model: the check passes, the runtime refuses it."""
    garbage = b"\x08\x07garbage that is not an onnx graph"
    replace(model_copy, "model.onnx", garbage)
    data = manifest_data()
    for entry in data["files"]:
        if entry["name"] == "model.onnx":
            entry.update(size=len(garbage), sha256=hashlib.sha256(garbage).hexdigest())
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    error = refusal(manifest_path=tmp_path / MANIFEST_NAME, directory=model_copy)
    assert status_line(error) == not_loaded("runtime")


def test_telemetry_is_off_whatever_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fresh interpreter, with ORT_DISABLE_TELEMETRY=0: set to 1 before onnxruntime is imported,
    and the runtime's own switch is called."""
    probe = """
import os, sys, importlib
from squirrel_mcp_embeddings import embedder
seen = {}
real_import = importlib.import_module
def watching(name):
    if name == "onnxruntime":
        seen["before"] = ("onnxruntime" in sys.modules, os.environ["ORT_DISABLE_TELEMETRY"])
        module = real_import(name)
        switch = module.disable_telemetry_events
        def recorded():
            seen["switch"] = True
            switch()
        module.disable_telemetry_events = recorded
        return module
    return real_import(name)
embedder.importlib.import_module = watching
embedder.load()
print(seen["before"], seen.get("switch"))
"""
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "0"}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "(False, '1') True"


# Vectors.


def test_meaning_is_found_and_unrelated_is_not(model: Embedder) -> None:
    floor = model.manifest.min_similarity
    query, related, unrelated = model.embed(
        ["food allergies", "Is allergic to peanuts", "The quarterly tax return is due in April"]
    )
    assert cosine(query, related) > floor
    assert cosine(query, unrelated) < floor


def test_vectors_are_unit_float32(model: Embedder) -> None:
    vectors = model.embed(["one", "two words", ""])
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, model.manifest.dimensions)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert model.embed([]).shape == (0, model.manifest.dimensions)


def test_a_text_is_the_same_alone_and_beside_longer_texts(model: Embedder) -> None:
    text = "Is allergic to peanuts"
    long_texts = ["a long paragraph about the history of trains in Europe " * 12, "word " * 400]
    alone = model.embed([text])[0]
    for batch in ([text, *long_texts], [*long_texts, text]):
        beside = model.embed(batch)
        np.testing.assert_allclose(beside[batch.index(text)], alone, atol=1e-5)
    # Across batch boundaries too.
    many = model.embed([*long_texts * 20, text], batch_size=8)
    np.testing.assert_allclose(many[-1], alone, atol=1e-5)


def test_text_is_truncated_at_max_tokens(model: Embedder) -> None:
    # Each "word" is one token; [CLS] and [SEP] take two of the limit.
    kept = " ".join(["word"] * (model.manifest.max_tokens - 2))
    a, b = model.embed([kept, kept + " but this tail is past the limit"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_vectors_match_the_reference_pipeline(model: Embedder) -> None:
    reference = json.loads(REFERENCE.read_text())
    assert reference["model"] == model.manifest.model
    expected = np.array(reference["vectors"], dtype=np.float32)
    actual = model.embed(reference["texts"])
    assert float(np.abs(actual - expected).max()) < 1e-5


def reference_vectors(texts: list[str]) -> np.ndarray:
    """sentence-transformers' pipeline in torch on the official safetensors: token embeddings,
    attention-mask mean, L2 normalisation; one text at a time, so no padding at all."""
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    fetch = import_fetch()
    source = fetch.cache_root() / "all-MiniLM-L6-v2" / "source"
    manifest = json.loads((ROOT / "model" / "all-MiniLM-L6-v2" / MANIFEST_NAME).read_text())
    for entry in manifest["source"]["files"]:
        fetch.check(entry["name"], (source / entry["name"]).read_bytes(), entry)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=manifest["maxTokens"])
    bert = BertModel.from_pretrained(source, local_files_only=True).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            encoding = tokenizer.encode(text)
            ids = torch.tensor([encoding.ids])
            mask = torch.tensor([encoding.attention_mask])
            hidden = bert(
                input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
            ).last_hidden_state
            weights = mask.unsqueeze(-1).float()
            mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            rows.append(torch.nn.functional.normalize(mean, p=2, dim=1)[0].numpy())
    return np.stack(rows)


def test_reference_vectors_are_what_torch_computes(model: Embedder) -> None:
    if importlib.util.find_spec("torch") is None:
        # nox -s tests installs torch only to export the model or when told to (as .ci/run does).
        if os.environ.get("SQUIRREL_TEST_TORCH_REQUIRED") == "1":
            pytest.fail("torch is not installed, and SQUIRREL_TEST_TORCH_REQUIRED=1")
        pytest.skip("torch is not installed (SQUIRREL_TEST_TORCH_REQUIRED=1 makes nox -s tests install it)")
    reference = json.loads(REFERENCE.read_text())
    computed = reference_vectors(reference["texts"])
    assert float(np.abs(computed - np.array(reference["vectors"])).max()) < 1e-6
    assert float(np.abs(computed - model.embed(reference["texts"])).max()) < 1e-5


# The fetch step's refusals (no network: each refuses before any download).


def test_fetch_refuses_gte_small_while_unpinned(capsys: pytest.CaptureFixture[str]) -> None:
    fetch = import_fetch()
    assert fetch.main(["--model", "gte-small"]) == 1
    assert "no full commit hash" in capsys.readouterr().err
    manifest = json.loads((ROOT / "model" / "gte-small" / MANIFEST_NAME).read_text())
    manifest["revision"] = "0" * 40  # even at a full commit, a null hash is refused before downloading
    with pytest.raises(fetch.FetchError, match="cannot be trusted"):
        fetch.hub(manifest, Path("/nonexistent"), None)


def test_fetch_check_refuses_a_mismatch() -> None:
    fetch = import_fetch()
    entry = {"size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert fetch.check("f", b"abc", entry) == b"abc"
    for data in (b"abd", b"ab"):
        with pytest.raises(fetch.FetchError):
            fetch.check("f", data, entry)
    with pytest.raises(fetch.FetchError, match="cannot be trusted"):
        fetch.check("f", b"abc", {"size": None, "sha256": None})


def test_packaged_files_match_the_repository_manifest() -> None:
    """What the plugin ships is the manifest in model/ (the fetch copied, and checked, it)."""
    assert (
        PACKAGED_MANIFEST.read_bytes() == (ROOT / "model" / "all-MiniLM-L6-v2" / MANIFEST_NAME).read_bytes()
    )
    read_checked(read_manifest(), PACKAGED_MODEL_DIR)


if __name__ == "__main__":
    texts = [
        "food allergies",
        "Is allergic to peanuts",
        "The quarterly tax return is due in April",
        "Pi-hole blocks ads for the whole home network via DNS",
        "Prefers window seats on long flights, and tea over coffee.",
        " ".join(["a very long memory"] * 100),
    ]
    vectors = reference_vectors(texts)
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(
        json.dumps(
            {
                "model": "sentence-transformers/all-MiniLM-L6-v2",
                "how": "torch BertModel on the official model.safetensors, mask-weighted mean, L2",
                "texts": texts,
                "vectors": [[float(f"{x:.9g}") for x in row] for row in vectors.tolist()],
            }
        )
        + "\n"
    )
    print(f"wrote {REFERENCE}")
