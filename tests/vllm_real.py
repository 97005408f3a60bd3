"""vLLM's own modules (0.33 or 0.34), loaded for tests/test_vllm_real.py on a CPU.

Imported only where one of `vllm_features.VLLM_RELEASES` is installed (the CI stage "vllm" of
.ci/run runs 0.33.0, then 0.34.0). What makes vLLM's code run without a GPU,
and why:

- VLLM_TARGET_DEVICE=cpu: otherwise vLLM's buffers ask for pinned memory.
- CUDA_VISIBLE_DEVICES="": with a CUDA build of torch and no GPU driver,
  vLLM would otherwise replace triton by a placeholder whose kernels
  cannot launch (vllm.triton_utils.HAS_TRITON); both are set before
  vLLM is imported, and `check_triton` skips with the reason if it still did.
- TRITON_INTERPRET=1 (tests/conftest.py): vLLM's kernels and ours run in
  triton's interpreter on CPU tensors.
- `vllm.v1.worker.gpu.buffer_utils.is_uva_available` made to return False
  (`no_uva`): vLLM's `RopeState` then keeps its table as a plain tensor,
  vLLM's own fallback for platforms without UVA.

Where the two releases differ in what these tests touch:

- vLLM 0.34 removed the Keye and Keye-VL-1.5 models (`served` is False for
  them: their tests skip there);
- its scheduler hands the runner a request's prompt as a `TokenBuffer` (an
  int32 `array.array`) rather than a list; `prefill_ids` makes what the
  installed release hands.

Everything else is vLLM's code as released: its `RopeState`, its
`DefaultModelState`, its pruner and its model classes'
``get_mrope_input_positions``. A model is its real class, built without
weights (`model_instance`: `nn.Module.__init__` and the config vLLM would
hand it); features are vLLM's own `MultiModalFeatureSpec`,
`PlaceholderRange` and `MultiModalFieldElem` (`real_features`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import types
import warnings

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import pytest  # noqa: E402
import torch  # noqa: E402

with warnings.catch_warnings():  # vLLM's import-time deprecation notices are not ours to fail on
    warnings.simplefilter("ignore")
    from vllm.multimodal.inputs import (  # noqa: E402
        MultiModalBatchedField,
        MultiModalFeatureSpec,
        MultiModalFieldElem,
        MultiModalKwargsItem,
        PlaceholderRange,
    )
    from vllm.triton_utils import HAS_TRITON  # noqa: E402
    from vllm.v1.worker.gpu import buffer_utils  # noqa: E402
    from vllm.v1.worker.gpu.mm import rope  # noqa: E402

try:  # vLLM 0.34: the scheduler's prompt ids
    from vllm.v1.token_buffer import TokenBuffer as _PREFILL_IDS  # noqa: E402
except ImportError:  # vLLM 0.33: a list
    _PREFILL_IDS = list

# recorded family name -> (module under vllm.model_executor.models, model class)
MODEL_CLASSES = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    "qwen2_5_omni": ("qwen2_5_omni_thinker", "Qwen2_5OmniThinkerForConditionalGeneration"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLForConditionalGeneration"),
    "qwen3_omni": ("qwen3_omni_moe_thinker", "Qwen3OmniMoeThinkerForConditionalGeneration"),
    "glm4_1v": ("glm4_1v", "Glm4vForConditionalGeneration"),
    "paddleocr_vl": ("paddleocr_vl", "PaddleOCRVLForConditionalGeneration"),
    "ernie45_vl": ("ernie45_vl", "Ernie4_5_VLMoeForConditionalGeneration"),
    "keye": ("keye", "KeyeForConditionalGeneration"),
    "keye_vl1_5": ("keye_vl1_5", "KeyeVL1_5ForConditionalGeneration"),
    "glm_ocr": ("glm_ocr", "GlmOcrForConditionalGeneration"),
    "isaac": ("isaac", "IsaacForConditionalGeneration"),
    "openpangu_vl": ("openpangu_vl", "OpenPanguVLForConditionalGeneration"),
    "bailing_moe_v3_vl": ("bailing_moe_v3_vl", "BailingMoeV3VLForConditionalGeneration"),
    "cohere_compass": ("cohere_compass", "CohereCompassForConditionalGeneration"),
}


def check_triton() -> None:
    if not HAS_TRITON:
        pytest.skip(
            "vLLM replaced triton by its placeholder (no GPU driver found): run with CUDA_VISIBLE_DEVICES='' "
            "and TRITON_INTERPRET=1 set before vLLM is imported"
        )


@contextlib.contextmanager
def no_uva():
    """vLLM's buffers take their no-UVA fallback for the duration (no pinned memory on a CPU)."""
    original = buffer_utils.is_uva_available
    buffer_utils.is_uva_available = lambda: False
    try:
        yield
    finally:
        buffer_utils.is_uva_available = original


# MiniCPM-V 4.7: the one model whose get_mrope_input_positions vLLM 0.34 changed (it reads the ids through
# numpy); its prompts are recorded apart (tests/data/vllm-0.33.0-minicpmv4_7.jsonl), so it is not a family above
CANVAS_MODEL = ("minicpmv4_7", "MiniCPMV4_7ForConditionalGeneration")


def canvas_model(config) -> torch.nn.Module:
    """vLLM's MiniCPM-V 4.7 class with no layer and no weight, its canvas settings read from `config`
    by its own `_init_canvas_mrope` (which takes every marker id from the config when it holds them)."""
    model = _bare(_load(*CANVAS_MODEL), config)
    model._init_canvas_mrope(None)
    return model


def served(family: str) -> bool:
    """Whether the installed vLLM has `family`'s model class (0.34 dropped Keye's two)."""
    return importlib.util.find_spec(f"vllm.model_executor.models.{MODEL_CLASSES[family][0]}") is not None


def require_served(family: str) -> None:
    if not served(family):
        pytest.skip(f"vLLM {vllm_version()} has no {MODEL_CLASSES[family][1]} (removed in 0.34)")


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def prefill_ids(token_ids: list[int]):
    """`token_ids` as the installed vLLM's scheduler hands them to the runner (`prefill_token_ids`)."""
    return _PREFILL_IDS(token_ids)


def _load(module_name: str, class_name: str) -> type:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module(f"vllm.model_executor.models.{module_name}")
    return getattr(module, class_name)


def _bare(cls: type, config) -> torch.nn.Module:
    """An instance of vLLM's model class `cls` with no layer and no weight, holding `config`."""
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    model.config = config
    return model


def model_class(family: str) -> type:
    return _load(*MODEL_CLASSES[family])


def namespace(config: dict):
    """A recorded config dict as the attribute tree vLLM's model code reads (`self.config.x.y`)."""
    return types.SimpleNamespace(**{k: namespace(v) if isinstance(v, dict) else v for k, v in config.items()})


def model_instance(family: str, config) -> torch.nn.Module:
    """vLLM's model class for `family`, with no layer and no weight: what its
    M-RoPE methods read is `self.config` (and the class's own methods)."""
    return _bare(model_class(family), config)


def real_features(features) -> list:
    """vLLM's own feature objects holding what the tests' stand-ins hold."""
    out = []
    for i, feature in enumerate(features):
        item = MultiModalKwargsItem(
            {
                key: MultiModalFieldElem(data=elem.data, field=MultiModalBatchedField())
                for key, elem in feature.data.items()
            }
        )
        position = feature.mm_position
        out.append(
            MultiModalFeatureSpec(
                data=item,
                modality=feature.modality,
                identifier=f"item-{i}",
                mm_position=PlaceholderRange(
                    offset=position.offset, length=position.length, is_embed=position.is_embed
                ),
            )
        )
    return out


def vllm_rope_state(num_dims: int, max_num_reqs: int, max_num_tokens: int, max_model_len: int):
    """vLLM's own `RopeState` on the CPU (its no-UVA table)."""
    with no_uva():
        return rope.RopeState(num_dims, max_num_reqs, max_num_tokens, max_model_len, torch.device("cpu"))
