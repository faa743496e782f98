"""The spec's word-matching rules again, through the real server over stdio."""

from __future__ import annotations

import pytest
from mcp import Client

from tests.conftest import call
from tests.test_search import CASES, MEMORIES, UNSEARCHABLE

pytestmark = pytest.mark.anyio


async def test_spec_examples_through_the_server(client: Client) -> None:
    for text in MEMORIES:
        await call(client, "save_memory", text=text)
    for rule, query, expected in CASES:
        found = await call(client, "search_memory", query=query, limit=50)
        assert found["ranking"] == "lexical" and "note" not in found, rule
        scores = {hit["text"]: hit["lexicalScore"] for hit in found["results"]}
        assert scores == pytest.approx(expected, abs=1e-6), rule
        assert found["total"] == len(expected), rule
        ranked = [hit["score"] for hit in found["results"]]
        assert ranked == sorted(ranked, reverse=True), rule
    for query in UNSEARCHABLE:
        found = await call(client, "search_memory", query=query)
        assert found["results"] == [] and found["total"] == 0
        assert "cannot be searched" in found["note"]


async def test_the_server_index_follows_corrections_deletes_and_filters(client: Client) -> None:
    saved = (await call(client, "save_memory", text="Runs Pi-hole at home", tags=["network"]))["memory"]
    await call(client, "save_memory", text="Pihole blocks ads", category="fact")
    found = await call(client, "search_memory", query="pihole", tags=["NETWORK"])
    assert [hit["id"] for hit in found["results"]] == [saved["id"]] and found["total"] == 1
    assert (await call(client, "search_memory", query="pihole", category="fact"))["total"] == 1
    assert (await call(client, "search_memory", query="pihole", limit=1))["total"] == 2
    await call(client, "update_memory", id=saved["id"], text="Runs AdGuard at home", reason="switched")
    assert (await call(client, "search_memory", query="pihole"))["total"] == 1
    assert (await call(client, "search_memory", query="adguard"))["total"] == 1
    await call(client, "delete_memory", id=saved["id"])
    assert (await call(client, "search_memory", query="adguard"))["total"] == 0


async def test_prefixes_through_the_server(client: Client) -> None:
    allergic = (await call(client, "save_memory", text="Allergic to peanuts"))["memory"]
    await call(client, "save_memory", text="Allergics anonymous meeting")
    await call(client, "save_memory", text="Prints figurines in 3ds format")
    found = await call(client, "search_memory", query="allergic")
    # The word spelled out ranks above a longer word beginning with it, which holds it only in part.
    assert [hit["text"] for hit in found["results"]] == ["Allergic to peanuts", "Allergics anonymous meeting"]
    assert [hit["lexicalScore"] for hit in found["results"]] == [1.0, 0.5]
    assert (await call(client, "search_memory", query="allerg"))["total"] == 2
    assert (await call(client, "search_memory", query="3d"))["total"] == 0
    assert (await call(client, "search_memory", query="3ds"))["total"] == 1
    # The server's vocabulary follows a correction: the old word's prefix no longer finds it.
    await call(client, "update_memory", id=allergic["id"], text="Intolerant to peanuts", reason="milder")
    assert (await call(client, "search_memory", query="allerg"))["total"] == 1
    assert (await call(client, "search_memory", query="intol"))["total"] == 1


async def test_a_prefix_is_never_the_whole_word_through_the_server(client: Client) -> None:
    epipen = (await call(client, "save_memory", text="Is allergic to peanuts and carries an EpiPen"))[
        "memory"
    ]
    subaru = (await call(client, "save_memory", text="Drives a blue Subaru; the car is due a service"))[
        "memory"
    ]
    found = await call(client, "search_memory", query="car")
    # "carries" begins with "car" but is another word: a partial match, ranked below the car.
    assert [(hit["id"], hit["lexicalScore"]) for hit in found["results"]] == [
        (subaru["id"], 1.0),
        (epipen["id"], 0.5),
    ]
    assert found["results"][0]["score"] > found["results"][1]["score"]
    # Every query word held in full only by a memory that holds each as a word.
    both = await call(client, "search_memory", query="car peanuts")
    assert {hit["id"]: hit["lexicalScore"] for hit in both["results"]} == {
        subaru["id"]: 0.5,
        epipen["id"]: 0.75,
    }


async def test_common_words_and_contraction_pieces_never_make_a_hit_through_the_server(
    client: Client,
) -> None:
    landlord = (await call(client, "save_memory", text="The landlord's number is in the blue folder"))[
        "memory"
    ]
    for text in ("She's at Anna's until Friday", "It's Tom's turn to cook", "Don't book the 7am train"):
        await call(client, "save_memory", text=text)
    found = await call(client, "search_memory", query="landlord's")
    assert [hit["id"] for hit in found["results"]] == [landlord["id"]] and found["total"] == 1
    assert found["results"][0]["lexicalScore"] == 1.0
    # A query of common words only is not searched by words: no hits, and a note saying why.
    for query in ("who is it", "What's that?", "don't", "s t ll ve re d m"):
        answer = await call(client, "search_memory", query=query)
        assert (answer["results"], answer["total"], answer["ranking"]) == ([], 0, "lexical"), query
        assert "only common words" in answer["note"] and "words that matter" in answer["note"], query
