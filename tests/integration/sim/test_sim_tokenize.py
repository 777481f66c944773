"""`/tokenize` (what vllm-router's kv_aware policy asks every worker) and `--tokenizer`."""

import pytest
from sim_http_harness import running_sim
from tokenizers import Tokenizer, models, pre_tokenizers

PROMPT = "alpha beta gamma delta alpha beta"


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> str:
    """A word-level tokenizer.json: ids are easy to predict."""
    vocab = {"[UNK]": 0, "alpha": 1, "beta": 2, "gamma": 3, "delta": 4, "<|im_start|>": 5}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def test_tokenize_gives_the_ids_a_completion_uses():
    with running_sim() as sim:
        body = sim.post("/tokenize", {"model": "Qwen/Qwen3-0.6B", "prompt": PROMPT}).json()
        assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 4096
        assert body["token_strs"] is None
        done = sim.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1}).json()
        assert done["usage"]["prompt_tokens"] == body["count"]
        again = sim.post("/v1/completions", {"prompt": body["tokens"], "max_tokens": 1}).json()
        assert again["kvbench"]["cached_tokens"] == (body["count"] - 1) // 16 * 16


def test_tokenize_chat_and_errors():
    with running_sim() as sim:
        messages = [{"role": "user", "content": PROMPT}]
        chat = sim.post("/tokenize", {"messages": messages}).json()
        done = sim.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()
        assert chat["count"] == done["usage"]["prompt_tokens"]
        bare = sim.post("/tokenize", {"messages": messages, "add_generation_prompt": False})
        assert bare.json()["count"] < chat["count"]
        missing = sim.post("/tokenize", {"model": "other", "prompt": "x"})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFoundError"
        assert sim.post("/tokenize", {"model": "Qwen/Qwen3-0.6B"}).status_code == 400


def test_tokenizer_flag_uses_the_tokenizer_json(tokenizer_json):
    with running_sim(tokenizer=tokenizer_json) as sim:
        body = sim.post("/tokenize", {"prompt": PROMPT, "return_token_strs": True}).json()
        assert body["tokens"] == [1, 2, 3, 4, 1, 2]
        assert body["token_strs"] == ["alpha", "beta", "gamma", "delta", "alpha", "beta"]
        done = sim.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}).json()
        assert done["usage"]["prompt_tokens"] == 6
        out_of_vocab = sim.post("/v1/completions", {"prompt": [7], "max_tokens": 1})
        assert out_of_vocab.status_code == 400
        assert sim.get("/version").json()["kvbench_sim"]["tokenizer"] == tokenizer_json
