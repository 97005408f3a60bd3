"""Isaac (Perceptron): images only, each at (s, i, j), H and W the raw row and
column with no base added.

Its processor replaces the text ``<image>`` by ``<|image_pad|>*(h'w')``, with
no start or end token; the merge size is ``vision_config.pixel_shuffle_scale_factor``.
vLLM 0.33 places image n at s = 1 + the previous block's largest position (T,
H or W), text between images continues from there, but text after the last
image resumes at that image's T + 1, so it can reuse positions the image's H
and W rows took; delta still comes from the overall maximum
(docs/semantics.md, "Isaac"). Isaac has no transformers implementation:
vLLM's rule is the only one, and the reference follows it.
"""

from ._spec import Family, first, get


def read_config(scopes, semantics=None) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    vision = first(scopes, ("vision_config",))
    return {
        # vLLM sets it at load time from the tokenizer's "<|image_pad|>"; configs may carry it
        "image_token_id": first((*scopes, *text), ("image_token_id",)),
        "spatial_merge_size": get(vision, "pixel_shuffle_scale_factor"),
    }


FAMILY = Family(
    name="isaac",
    model_types={"isaac": ""},
    defaults={"image_token_id": 151655, "spatial_merge_size": 2},
    read_config=read_config,
    raw_spatial=True,
    fallback_notes={
        "image_token_id": "the id of <|image_pad|> in Isaac's Qwen3 vocabulary",
        "spatial_merge_size": "Isaac-0.1 publishes pixel_shuffle_scale_factor 2; vLLM's IsaacConfig falls back to 1",
    },
)
