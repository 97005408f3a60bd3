"""The vLLM plugin's EVS part: Model Runner V2's pruner gives our rule's positions.

With ``--video-pruning-rate``, vLLM 0.33's Qwen2.5-VL and Qwen3-VL prune each
video's embedding rows in ``_postprocess_video_embeds_evs`` (where the
retention mask exists) and append position channels; MRV2's
``MultiModalPruner.recompute`` then calls the model's
``recompute_mrope_positions`` per request and chunk and stages the result
with ``RopeState.update_prefill_positions``. `install_evs()` changes three
things, and only for models whose pruner it saw built:

- ``MultiModalPruner.__init__`` marks the model (its config read with our
  `MRopeConfig`), when it is one of `MODEL_CLASSES` and its family prunes;
- each of `MODEL_CLASSES`' ``_postprocess_video_embeds_evs`` runs vLLM's own,
  recording the masks its ``compute_retention_mask`` returns, then writes the
  identity channels (`mrope_tracker.evs_recompute.write_identity_columns`)
  of a marked model's rows;
- ``MultiModalPruner.recompute`` of a marked model calls
  `EvsRecompute.recompute_mrope_positions` instead of the model's, with an
  `EvsRecompute` built once per request from its features and prompt ids.

An unmarked model (vLLM's V1 runner, which calls the model's own recompute;
any other pruning model) runs vLLM's code unchanged. As with `install()`,
every target is checked before anything changes (`PRUNER_METHODS`, `MODEL_CLASSES`,
tests/data/vllm-0.33.0-rope-api.json).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect

from ..core.config import MRopeConfig
from ..evs.pruned import PRUNABLE
from ..evs.recompute import NUM_EXTRA_COLUMNS, EvsRecompute, pruned_prompt_from_features, write_identity_columns

__all__ = ["MODEL_CLASSES", "PRUNER_METHODS", "install_evs"]

PRUNER_MODULE = "vllm.v1.worker.gpu.model_states.mm_pruning"
PRUNER_METHODS = {
    "__init__": ("model", "rope_state", "encoder_cache", "inputs_embeds_size"),
    "recompute": ("mm_embeds", "input_batch", "req_states"),
    "_num_window_embeds": ("req_id", "query_start", "query_end"),
}
# model module, class, the mask functions its postprocess calls by module-global name
MODEL_CLASSES = (
    ("vllm.model_executor.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", ("compute_retention_mask",)),
    (
        "vllm.model_executor.models.qwen3_vl",
        "Qwen3VLForConditionalGeneration",
        ("compute_retention_mask", "vidcom2_compute_retention_mask"),
    ),
)
POSTPROCESS = "_postprocess_video_embeds_evs"
POSTPROCESS_PARAMS = ("video_embeds_split", "video_input")
MARK = "_mrope_tracker_evs_config"  # set on a model instance whose pruner is ours
PATCHED = "mrope_tracker_original"


def _params(function) -> tuple[str, ...]:
    original = getattr(function, PATCHED, function)
    return tuple(p for p in inspect.signature(original).parameters if p != "self")


def _fail(what: str) -> RuntimeError:
    return RuntimeError(f"mrope_tracker.vllm.install: {what}; its EVS hook patches vLLM 0.33 and 0.34")


def check_evs_targets() -> tuple[object, list[tuple[object, type, tuple[str, ...]]]]:
    """The pruner class and the model classes, each checked against vLLM 0.33's
    names and parameters; RuntimeError naming the first difference."""
    try:
        pruner_module = importlib.import_module(PRUNER_MODULE)
    except ImportError as exc:
        raise _fail(f"cannot import {PRUNER_MODULE} ({exc})") from exc
    pruner = getattr(pruner_module, "MultiModalPruner", None)
    if pruner is None or not hasattr(pruner_module, "copy_mm_embedding_modality"):
        raise _fail(f"{PRUNER_MODULE} has no MultiModalPruner or copy_mm_embedding_modality")
    for name, params in PRUNER_METHODS.items():
        method = getattr(pruner, name, None)
        if method is None or _params(method) != params:
            raise _fail(f"{PRUNER_MODULE}.MultiModalPruner.{name} differs (expected parameters {params})")
    models = []
    for module_name, class_name, mask_functions in MODEL_CLASSES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise _fail(f"cannot import {module_name} ({exc})") from exc
        cls = getattr(module, class_name, None)
        method = getattr(cls, POSTPROCESS, None)
        if method is None or _params(method) != POSTPROCESS_PARAMS:
            raise _fail(f"{module_name}.{class_name}.{POSTPROCESS} differs (expected parameters {POSTPROCESS_PARAMS})")
        missing = [name for name in mask_functions if not callable(getattr(module, name, None))]
        if missing:
            raise _fail(f"{module_name} has no {', '.join(missing)}")
        models.append((module, cls, mask_functions))
    return pruner, models


@contextlib.contextmanager
def _recording_masks(module, names: tuple[str, ...], masks: list):
    """The module's mask functions, for the duration, append what they return to `masks`."""
    originals = {name: getattr(module, name) for name in names}

    def recording(function):
        def record(*args, **kwargs):
            mask = function(*args, **kwargs)
            masks.append(mask)
            return mask

        return record

    try:
        for name, function in originals.items():
            setattr(module, name, recording(function))
        yield masks
    finally:
        for name, function in originals.items():
            setattr(module, name, function)


def _patched_postprocess(original, module, mask_functions):
    def postprocess(self, video_embeds_split, video_input):
        config = getattr(self, MARK, None)
        if config is None:
            return original(self, video_embeds_split, video_input)
        with _recording_masks(module, mask_functions, []) as masks:
            out = original(self, video_embeds_split, video_input)
        if len(masks) != len(out):
            raise RuntimeError(
                f"mrope_tracker EVS hook: expected one retention mask per video ({len(out)}), recorded {len(masks)}"
            )
        with _sync_allowed():
            return tuple(write_identity_columns(e, m, family=config.family) for e, m in zip(out, masks))

    setattr(postprocess, PATCHED, original)
    return postprocess


def _patched_init(original, model_classes, semantics):
    def __init__(self, model, rope_state, encoder_cache, inputs_embeds_size):
        original(self, model, rope_state, encoder_cache, inputs_embeds_size)
        if not isinstance(model, model_classes):
            return
        try:
            config = MRopeConfig.from_hf_config(model.config, semantics=semantics)
        except (ValueError, TypeError, AttributeError):
            return
        if config.family in PRUNABLE:
            setattr(model, MARK, config)

    setattr(__init__, PATCHED, original)
    return __init__


def _sync_allowed():
    """vLLM's ``gpu_sync_allowed()`` where it has one: the recompute reads the
    chunk's identity channels on the host, as vLLM's own recompute syncs."""
    try:
        from vllm.utils.gpu_sync_debug import gpu_sync_allowed
    except ImportError:
        return contextlib.nullcontext()
    return gpu_sync_allowed()


def _request_recompute(self, requests: dict, config, req_id, req_idx: int, prefill_len: int, req_states):
    """The request's EvsRecompute (None: it holds no video), built once while it
    prefills; a request whose slot, length or features change is built anew."""
    features = self.encoder_cache.mm_features[req_id]
    key = (req_idx, prefill_len, id(features))
    cached = requests.get(req_id)
    if cached is None or cached[0] != key:
        ids = req_states.all_token_ids.gpu[req_idx, :prefill_len].cpu().numpy()
        prompt, placeholders = pruned_prompt_from_features(config, ids, features)
        cached = (key, None if prompt is None else EvsRecompute(prompt, placeholders))
        requests[req_id] = cached
    return cached[1]


def _patched_recompute(original, pruner_module):
    def recompute(self, mm_embeds, input_batch, req_states):
        config = getattr(self.model, MARK, None)
        if config is None:
            return original(self, mm_embeds, input_batch, req_states)
        # one EvsRecompute a request while it prefills: dropped once it leaves the batch
        requests = self.__dict__.setdefault("_mrope_tracker_requests", {})
        live = set(input_batch.req_ids)
        for req_id in [r for r in requests if r not in live]:
            del requests[req_id]
        extra = NUM_EXTRA_COLUMNS[config.family]
        copy = pruner_module.copy_mm_embedding_modality
        cleaned, used = [], 0
        idx_mapping = input_batch.idx_mapping_np.tolist()
        prefill_lens = input_batch.prefill_len_np.tolist()
        computed = input_batch.num_computed_prefill_tokens_np.tolist()
        scheduled = input_batch.num_scheduled_tokens.tolist()
        for b, req_id in enumerate(input_batch.req_ids):
            count = self._num_window_embeds(req_id, computed[b], computed[b] + scheduled[b])
            if count == 0:
                continue
            req_embeds = mm_embeds[used : used + count]
            used += count
            req_idx, prefill_len = idx_mapping[b], prefill_lens[b]
            recompute_request = _request_recompute(self, requests, config, req_id, req_idx, prefill_len, req_states)
            if recompute_request is None:  # images only: their positions are exact from admission
                cleaned.extend(copy(m, m[:, : m.shape[1] - extra]) for m in req_embeds)
                continue
            positions = self.rope_state.read_prefill_positions(req_idx, prefill_len).long()
            with _sync_allowed():
                req_cleaned, positions, delta = recompute_request.recompute_mrope_positions(
                    range(prefill_len), req_embeds, positions, computed[b]
                )
            self.rope_state.update_prefill_positions(req_idx, positions, delta)
            cleaned.extend(copy(src, dst) for src, dst in zip(req_embeds, req_cleaned))
        if used != len(mm_embeds):
            raise RuntimeError(f"mrope_tracker EVS hook: {len(mm_embeds)} embeddings in the batch, {used} placed")
        return cleaned

    setattr(recompute, PATCHED, original)
    return recompute


def install_evs(*, semantics: str = "vllm-0.33") -> bool:
    """Patch MRV2's pruner and the pruning models (see the module docstring);
    returns False when it was already installed."""
    pruner, models = check_evs_targets()
    if hasattr(pruner.recompute, PATCHED):
        return False
    pruner_module = importlib.import_module(PRUNER_MODULE)
    model_classes = tuple(cls for _, cls, _ in models)
    pruner.__init__ = _patched_init(pruner.__init__, model_classes, semantics)
    pruner.recompute = _patched_recompute(pruner.recompute, pruner_module)
    for module, cls, mask_functions in models:
        setattr(cls, POSTPROCESS, _patched_postprocess(getattr(cls, POSTPROCESS), module, mask_functions))
    return True
