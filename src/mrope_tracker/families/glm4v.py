"""GLM-4.1V, GLM-4.5V and GLM-4.6V: per-frame blocks like Qwen3-VL, with video
frames that reuse the image token.

Image: ``<|begin_of_image|> I*N <|end_of_image|>``. Video:
``<|begin_of_video|>`` then per frame ``<|begin_of_image|> I*h'w'
<|end_of_image|> <timestamp text>``, then ``<|end_of_video|>``. A run of
image tokens inside begin/end_of_video is the next frame of the current
video, outside it the next image. begin/end_of_image play the part of
Qwen's vision_start/vision_end.
"""

from ._spec import Family, first, get
from .qwen2_vl import TRANSFORMERS_VL_BATCH


def read_config(scopes, semantics=None) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    return {
        "image_token_id": first(where, ("image_token_id",)),
        "video_token_id": first(where, ("video_token_id",)),
        "vision_start_token_id": first(where, ("image_start_token_id",)),
        "vision_end_token_id": first(where, ("image_end_token_id",)),
        "video_start_token_id": first(where, ("video_start_token_id",)),
        "video_end_token_id": first(where, ("video_end_token_id",)),
        "spatial_merge_size": get(first(scopes, ("vision_config",)), "spatial_merge_size"),
    }


def config_dict(config) -> dict:
    return {
        "model_type": "glm4v",
        "image_token_id": config.image_token_id,
        "video_token_id": config.video_token_id,
        "image_start_token_id": config.vision_start_token_id,
        "image_end_token_id": config.vision_end_token_id,
        "video_start_token_id": config.video_start_token_id,
        "video_end_token_id": config.video_end_token_id,
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


FAMILY = Family(
    name="glm4v",
    model_types={"glm4v": "", "glm4v_moe": "", "glm46v": ""},
    # GLM-4.1V's published ids (GLM-4.5V/4.6V move the image and video tokens to 151363/151364)
    defaults={
        "image_token_id": 151343,
        "video_token_id": 151344,
        "vision_start_token_id": 151339,
        "vision_end_token_id": 151340,
        "video_start_token_id": 151341,
        "video_end_token_id": 151342,
        "spatial_merge_size": 2,
    },
    read_config=read_config,
    video_blocks="frames",
    video_brackets=True,
    transformers_batch=TRANSFORMERS_VL_BATCH,
    transformers_classes={
        "glm4v": ("glm4v", "Glm4vModel", "Glm4vConfig"),
        "glm4v_moe": ("glm4v_moe", "Glm4vMoeModel", "Glm4vMoeConfig"),
        "glm46v": ("glm46v", "Glm46VModel", "Glm46VConfig"),
    },
    config_dict=config_dict,
    fallback_notes={
        "image_token_id": "GLM-4.5V and GLM-4.6V publish 151363",
        "video_token_id": "GLM-4.5V and GLM-4.6V publish 151364",
    },
)
