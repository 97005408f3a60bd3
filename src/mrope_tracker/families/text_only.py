"""Models vLLM 0.33 serves with M-RoPE whose every token sits at its index.

Qwen3.5's text-only checkpoints (``Qwen3_5ForCausalLM``) run the Qwen3.5
backbone's three-row rotary embedding with plain sequential positions, and
MiniCPM-V 4.6 injects its vision embeddings without spatial positions: vLLM
gives every token, vision placeholders included, the same index on all three
rows, and delta 0. There are no ids: the token form takes no items, and the
vLLM adapter lays out the prompt as text whatever features it gets.
"""

from ._spec import Family


def read_config(scopes, semantics=None) -> dict:
    return {}


FAMILY = Family(
    name="text_only",
    model_types={"qwen3_5_text": "", "qwen3_5_moe_text": "", "minicpmv4_6": ""},
    # the merge size is never used; MRopeConfig requires one
    defaults={"spatial_merge_size": 1},
    read_config=read_config,
)
