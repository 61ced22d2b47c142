"""A tiny Llama whose greedy output follows a long token chain, built from code (no hub access).

The tokenizer is byte-level BPE without merges: every byte is one token (ids 0-255), plus
`</s>` (256), which the chain never reaches. The weights are seeded. Each token id t has an
embedding e_t, and the LM head row of next(t) is e_t, where next() walks all 256 byte ids in
one seeded cycle. So the argmax after any input token t is next(t), with a wide margin. The
attention and MLP outputs are scaled down (never zero, so the KV cache and the batch take part),
far too small to move an argmax.

A decode row that reads a stale input id therefore shows: fed the token before its last one,
it emits its last token again (a repeat); fed anything else, it leaves the chain.

    python -m tests.vllm.tiny_llama OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BYTES = 256
EOS = BYTES  # outside the chain: greedy decoding never ends early
VOCAB = 320  # padded, as real vocabularies are; ids above EOS are never produced
HIDDEN, LAYERS, HEADS, KV_HEADS, MLP = (
    128,
    2,
    2,
    1,
    256,
)  # head_dim 64: the CPU attention kernels need >= 32
MAX_LEN = 4096
SEED = 20261201
BLOCK_SCALE = 1e-3  # attention and MLP output projections: tiny, never zero


def chain(seed: int = SEED) -> list[int]:
    """next_id[t] for every byte id t: one cycle through all 256 of them."""
    import torch

    order = torch.randperm(BYTES, generator=torch.Generator().manual_seed(seed)).tolist()
    next_id = [0] * BYTES
    for i, token in enumerate(order):
        next_id[token] = order[(i + 1) % BYTES]
    return next_id


def build(out: Path, seed: int = SEED) -> Path:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    _write_tokenizer(out)
    (out / "config.json").write_text(json.dumps(_config(), indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": None, "eos_token_id": EOS, "do_sample": False}) + "\n"
    )
    gen = torch.Generator().manual_seed(seed)
    embed = torch.randn(VOCAB, HIDDEN, generator=gen)
    embed = embed / embed.norm(dim=1, keepdim=True) * HIDDEN**0.5  # RMS 1: the final norm keeps it
    head = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05
    for token, successor in enumerate(chain(seed)):
        head[successor] = embed[token] / HIDDEN**0.5
    tensors = {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    tensors["model.norm.weight"] = torch.ones(HIDDEN)
    head_dim = HIDDEN // HEADS
    shapes = {
        "self_attn.q_proj": (HIDDEN, HIDDEN),
        "self_attn.k_proj": (KV_HEADS * head_dim, HIDDEN),
        "self_attn.v_proj": (KV_HEADS * head_dim, HIDDEN),
        "self_attn.o_proj": (HIDDEN, HIDDEN),
        "mlp.gate_proj": (MLP, HIDDEN),
        "mlp.up_proj": (MLP, HIDDEN),
        "mlp.down_proj": (HIDDEN, MLP),
    }
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.input_layernorm.weight"] = torch.ones(HIDDEN)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = torch.ones(HIDDEN)
        for name, shape in shapes.items():
            weight = torch.randn(*shape, generator=gen) / shape[1] ** 0.5
            if name.endswith(("o_proj", "down_proj")):
                weight = weight * BLOCK_SCALE
            tensors[f"{prefix}.{name}.weight"] = weight
    save_file(
        {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}, out / "model.safetensors"
    )
    return out


def _config() -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": MLP,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": MAX_LEN,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": EOS,
    }


def _write_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet, key=_byte_of))}
    vocab["</s>"] = EOS
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="</s>")
    fast.model_max_length = MAX_LEN
    fast.save_pretrained(str(out))


def _byte_of(symbol: str) -> int:
    """The byte a ByteLevel stand-in character represents (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(BYTES):
        if b not in printable:
            table[chr(BYTES + extra)] = b
            extra += 1
    return table[symbol]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    print(build(args.out, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
