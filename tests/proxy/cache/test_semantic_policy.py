"""What the semantic cache embeds (the last user turn's text) and where it searches (its namespace)."""

from __future__ import annotations

import pytest

from proxy.cache.policy import SEMANTIC_MAX_CHARS, chat_key, last_user_text, semantic_namespace

SYSTEM = {"role": "system", "content": "You answer HR questions for Acme."}


def body(question: object, *before: dict, **params: object) -> dict:
    return {"model": "chat-faq", "messages": [*before, {"role": "user", "content": question}], **params}


def test_the_last_user_turn_is_its_text_or_its_text_parts_joined() -> None:
    assert last_user_text(body("How many leave days?", SYSTEM)) == "How many leave days?"
    parts = [{"type": "text", "text": "How many"}, {"type": "text", "text": "leave days?"}]
    assert last_user_text(body(parts)) == "How many\nleave days?"


@pytest.mark.parametrize("messages", [
    [],
    [SYSTEM],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! The answer is"}],
    [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                  {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}],
    [{"role": "user", "content": "   "}],
    [{"role": "user", "content": "x" * (SEMANTIC_MAX_CHARS + 1)}],
    [{"role": "user", "content": None}],
    ["not a message"],
])
def test_nothing_is_embedded_without_a_plain_text_user_turn_last(messages: list) -> None:
    assert last_user_text({"messages": messages}) is None
    assert last_user_text({}) is None


def test_only_the_last_question_may_differ_within_a_namespace() -> None:
    ns = semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?", SYSTEM), 256)
    assert ns.startswith("semantic:")
    assert semantic_namespace("hr", "gpt-x", "emb-1", body("What is my leave allowance?", SYSTEM), 256) == ns
    assert semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?", SYSTEM, stream=True,
                                                            user="u-7"), 256) == ns
    others = [
        semantic_namespace("it", "gpt-x", "emb-1", body("How many leave days?", SYSTEM), 256),  # team
        semantic_namespace("hr", "gpt-y", "emb-1", body("How many leave days?", SYSTEM), 256),  # answering model
        semantic_namespace("hr", "gpt-x", "emb-2", body("How many leave days?", SYSTEM), 256),  # embedding model
        semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?", SYSTEM), 512),  # output cap
        semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?"), 256),  # system prompt
        semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?", SYSTEM, temperature=0), 256),
        semantic_namespace("hr", "gpt-x", "emb-1", body("How many leave days?", SYSTEM,
                                                        {"role": "user", "content": "I am in Pune."}), 256),
    ]
    assert len({ns, *others}) == len(others) + 1


def test_a_namespace_never_equals_an_exact_key_and_leaves_the_body_unchanged() -> None:
    b = body("How many leave days?", SYSTEM)
    before = repr(b)
    assert semantic_namespace("hr", "gpt-x", "emb-1", b, 256) != chat_key("hr", "gpt-x", b, 256)
    assert repr(b) == before
