"""vLLM's block hashes in the simulator: canonical CBOR, sha256 / sha256_cbor, NONE_HASH.

The expected bytes were produced by cbor2 6.2.1 (what vLLM's ``sha256_cbor`` calls) with
``cbor2.dumps(value, canonical=True)``; cbor2 is not a kvbench dependency, so they are
written out here rather than recomputed.
"""

import hashlib
import pickle

import pytest

from kvbench.sim.cbor import dumps_canonical
from kvbench.sim.hashing import (
    get_hash_fn_by_name,
    hash_block_tokens,
    init_none_hash,
    maybe_convert_block_hash,
    sha256,
    sha256_cbor,
    use_int_block_hashes,
)
from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import SimRequest

CBOR2_VECTORS = [
    ("0", "6130"),
    ("vllm-none-hash", "6e766c6c6d2d6e6f6e652d68617368"),
    (
        (b"\x01" * 32, tuple(range(16)), None),
        "8358200101010101010101010101010101010101010101010101010101010101010101"
        "90000102030405060708090a0b0c0d0e0ff6",
    ),
    (
        (b"\xab" * 32, (0, 23, 24, 255, 256, 65535, 65536, 151935, 2**32 - 1, 2**32), None),
        "835820abababababababababababababababababababababababababababababababab"
        "8a0017181818ff19010019ffff1a000100001a0002517f1affffffff1b0000000100000000f6",
    ),
    ((b"", (), ("lora", 7, -1, -24, -25, -256, -257)), "83408087646c6f7261072037381838ff390100"),
]
# sha256_cbor with PYTHONHASHSEED=0: NONE_HASH, then the first block of tokens 0..15.
NONE_HASH_SEED_0 = "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"
FIRST_BLOCK_SEED_0 = "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c"


@pytest.mark.parametrize(("value", "expected"), CBOR2_VECTORS)
def test_canonical_cbor_matches_cbor2(value, expected):
    assert dumps_canonical(value).hex() == expected


def test_cbor_refuses_what_block_hashes_never_hold():
    with pytest.raises(TypeError):
        dumps_canonical(1.5)
    with pytest.raises(ValueError):
        dumps_canonical(2**64)


def test_sha256_cbor_chain_matches_vllm_with_seed_0():
    none_hash = init_none_hash(sha256_cbor, {"PYTHONHASHSEED": "0"})
    assert none_hash.hex() == NONE_HASH_SEED_0
    assert hash_block_tokens(sha256_cbor, none_hash, range(16)).hex() == FIRST_BLOCK_SEED_0


def test_sha256_hashes_the_highest_protocol_pickle():
    parent = b"\x07" * 32
    value = (parent, tuple(range(16)), None)
    expected = hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    assert hash_block_tokens(sha256, parent, list(range(16))) == expected


def test_none_hash_seed_defaults_to_vllms_fixed_seed():
    assert init_none_hash(sha256, {}) == sha256("vllm-none-hash")
    assert init_none_hash(sha256, {"PYTHONHASHSEED": "42"}) == sha256("42")


def test_external_hashes_are_low_64_bits_unless_digests_are_asked_for():
    digest = bytes(range(32))
    assert maybe_convert_block_hash(digest, as_int=True) == int.from_bytes(digest[-8:], "big")
    assert maybe_convert_block_hash(digest, as_int=False) == digest
    assert use_int_block_hashes({}) is True
    assert use_int_block_hashes({"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "0"}) is False


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="xxhash"):
        get_hash_fn_by_name("xxhash")


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_cache_manager_chains_vllm_hashes_once_per_request(algo):
    kv = KVCacheManager(64, block_size=16, max_model_len=1024, hash_algo=algo)
    tokens = list(range(100, 150))
    request = SimRequest("r", tokens, 1, arrival_time=0.0)
    hashes = kv.ensure_block_hashes(request, 3)
    hash_fn = get_hash_fn_by_name(algo)
    parent, expected = init_none_hash(hash_fn), []
    for i in range(3):
        parent = hash_block_tokens(hash_fn, parent, tokens[i * 16 : (i + 1) * 16])
        expected.append(parent)
    assert hashes == expected
    assert kv.ensure_block_hashes(request, 2) is request.block_hashes
    assert len(request.block_hashes) == 3
