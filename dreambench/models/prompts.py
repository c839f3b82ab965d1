"""The one-word representation prompt (PromptReps; DiffRetriever Table 1), shared by the PromptReps and
DiffRetriever adapters and by the retriever's ``promptreps`` input template."""

from __future__ import annotations

SYSTEM = "You are an AI assistant that can understand human language."
USER = (
    '{label}: "{text}". Use one word to represent the {kind} in a retrieval task. Make sure your word is in lowercase.'
)
ANSWER = 'The word is "'
_MARKER = "\x00TEXT\x00"


def one_word_prompt(tokenizer, kind: str, user: str = USER, answer: str = ANSWER) -> tuple[list[int], list[int]]:
    """The token ids before and after a text of ``kind`` (query or passage) in the chat prompt that asks for one
    word to represent it, ending in the opened answer; a tokenizer without a chat template gets the messages
    as plain lines."""
    label = "Query" if kind == "query" else "Passage"
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user.format(label=label, text=_MARKER, kind=kind)},
    ]
    if tokenizer.chat_template:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + answer
    else:
        prompt = "\n".join(m["content"] for m in messages) + "\n" + answer
    before, after = prompt.split(_MARKER)
    return tokenizer.encode(before, add_special_tokens=False), tokenizer.encode(after, add_special_tokens=False)
