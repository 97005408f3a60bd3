"""vLLM's EVS recompute contract, with our rule's results.

vLLM 0.33's pruning models (Qwen2.5-VL, Qwen3-VL) append position channels to
each video's embedding rows (4 for Qwen2.5-VL, 5 for Qwen3-VL) and Model
Runner V2 calls, once per prefill chunk that holds media embeddings,
``model.recompute_mrope_positions(input_ids, multimodal_embeddings,
mrope_positions, num_computed_tokens)``, which returns the stripped
embeddings, the whole prompt's positions and the delta.

vLLM's own channels cannot give our rule (every kept token at its unpruned
position, docs/semantics.md "EVS"): they hold positions computed with
``second_per_grid_ts`` truncated, rounded to the embeddings' dtype (bfloat16
is exact only up to 256), and with ``second_per_grid_ts < 1`` every frame
has t = 0, so a token's frame is lost. So the channels carry identities
instead (`write_identity_columns`), written where the retention mask exists:
each video row's index in the unpruned t*h'*w' grid and, for Qwen3-VL, each
text row's ordinal among the span's text rows, as three base-256 digits
(integers up to 255 are exact in bfloat16, float16 and float32). Qwen3-VL's
last two channels keep vLLM's meaning (vision start, video row).

`EvsRecompute` holds one request's `PrunedPrompt` and its placeholder
ranges. A call reads the identities of the rows in the chunk, builds a mask
for each video they belong to that agrees with everything the chunk shows
(its rows where they are; the kept tokens before the chunk anywhere before
them, those after it anywhere after), and writes that layout's positions
from ``num_computed_tokens`` on. The chunk's own tokens are then exact:
under our rule a kept token's position depends on its identity alone, and
its index on how many video and text rows precede it, which the chunk tells.
Tokens after the chunk that a mask still decides get stand-in positions,
rewritten by the call whose chunk holds them (only a drafter's look-ahead
past the chunk could read one, as it could read vLLM's own stand-ins);
nothing before ``num_computed_tokens`` is touched. The result never depends
on where chunks start or end.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.features import checked_features, time_scales
from ..core.inputs import as_config, as_index, describe
from .pruned import PrunedPrompt

__all__ = ["EvsRecompute", "write_identity_columns", "pruned_prompt_from_features", "NUM_EXTRA_COLUMNS"]

# the channels vLLM 0.33 appends to a pruning model's embedding rows
NUM_EXTRA_COLUMNS = {"qwen2_5_vl": 4, "qwen3_vl": 5}
DIGITS = 3
DIGIT_BASE = 256  # every digit <= 255: exact in bfloat16's 8-bit significand
MAX_IDENTITY = DIGIT_BASE**DIGITS - 1
# the channel after the digits holds this tag (vLLM's own there: Qwen2.5-VL's w', Qwen3-VL's 0/1
# vision-start flag; neither is read by our recompute), so columns vLLM wrote are told apart
TAG = 201
DIGIT_WEIGHTS = np.array([DIGIT_BASE**d for d in range(DIGITS)], np.int64)  # identity = digits @ weights


def _identity_columns(identity: np.ndarray) -> torch.Tensor:
    """(rows, DIGITS + 1) float32: the base-256 digits of each identity, then the tag."""
    columns = np.empty((identity.shape[0], DIGITS + 1), np.float32)
    # an identity's digits are its low bytes (little-endian int64: all at once, no shift per digit)
    columns[:, :DIGITS] = identity.astype("<i8", copy=False).view(np.uint8).reshape(-1, 8)[:, :DIGITS]
    columns[:, DIGITS] = TAG
    return torch.from_numpy(columns)


def write_identity_columns(embeddings: torch.Tensor, retention_mask, *, family: str) -> torch.Tensor:
    """Overwrite the identity digits of one video's embedding rows, in place,
    as vLLM's ``_postprocess_video_embeds_evs`` leaves them: Qwen2.5-VL's
    rows are the kept tokens (4 channels); Qwen3-VL's are the whole span,
    its last channel marking the video rows (5 channels). Returns
    `embeddings`."""
    if family not in NUM_EXTRA_COLUMNS:
        raise ValueError(f"family: expected one of {', '.join(NUM_EXTRA_COLUMNS)}, got {family!r}")
    extra = NUM_EXTRA_COLUMNS[family]
    if not isinstance(embeddings, torch.Tensor) or embeddings.ndim != 2 or embeddings.shape[1] <= extra:
        expected = f"a 2-D tensor with more than {extra} columns"
        raise ValueError(f"embeddings: expected {expected}, got {describe(embeddings)}")
    mask = retention_mask.detach().cpu().numpy() if hasattr(retention_mask, "detach") else np.asarray(retention_mask)
    if mask.ndim != 1 or mask.dtype.kind not in "biu" or (mask.dtype != np.bool_ and ((mask != 0) & (mask != 1)).any()):
        raise ValueError(f"retention_mask: expected a 1-D bool or 0/1 array, got {describe(retention_mask)}")
    if mask.shape[0] - 1 > MAX_IDENTITY:
        raise ValueError(f"retention_mask: expected at most {MAX_IDENTITY + 1} entries, got {mask.shape[0]}")
    kept = np.flatnonzero(mask)
    rows = embeddings.shape[0]
    if family == "qwen2_5_vl":  # every row a video row
        is_video, num_video = None, rows
    else:
        is_video = (embeddings[:, -1] != 0).cpu().numpy()
        num_video = int(np.count_nonzero(is_video))
    if num_video != kept.shape[0]:
        raise ValueError(
            f"retention_mask: expected {num_video} kept tokens (the embedding's video rows), got {kept.shape[0]}"
        )
    if is_video is None:
        identity = kept
    else:
        identity = np.empty(rows, np.int64)
        identity[is_video] = kept
        identity[~is_video] = np.arange(rows - kept.shape[0])
    start = embeddings.shape[1] - extra
    # (a narrowed view's copy_: torch's slice assignment costs several times more, and copy_ converts alike)
    embeddings.narrow(1, start, DIGITS + 1).copy_(_identity_columns(identity))
    return embeddings


def _placeholder(value, index: int) -> tuple[int, int]:
    if hasattr(value, "offset") and hasattr(value, "length"):
        offset, length = value.offset, value.length
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        offset, length = value
    else:
        raise TypeError(
            f"placeholders[{index}]: expected an (offset, length) pair or a PlaceholderRange, got {describe(value)}"
        )
    offset = as_index(offset, f"placeholders[{index}].offset", minimum=0)
    return offset, as_index(length, f"placeholders[{index}].length", minimum=1)


def pruned_prompt_from_features(config, token_ids, mm_features) -> tuple[PrunedPrompt | None, list[tuple[int, int]]]:
    """A request's `PrunedPrompt` (None when it holds no video) and its items'
    (offset, length), from what vLLM 0.33 holds: its prompt ids and its
    multimodal features (read by duck typing, as `mrope_tracker.vllm` reads
    them; videos need ``video_grid_thw``; a missing ``second_per_grid_ts``
    takes the family default, as `features.time_scales` says)."""
    config = as_config(config)
    features = checked_features(mm_features)
    for f in features:
        if f.modality not in ("image", "video"):
            raise ValueError(f"mm_features[{f.index}].modality: expected image or video (EVS), got {f.modality!r}")
    placeholders = [(f.offset, f.length) for f in features]
    videos = [f for f in features if f.modality == "video"]
    if not videos:
        return None, placeholders
    images = [f for f in features if f.modality == "image"]
    prompt = PrunedPrompt(
        config,
        token_ids,
        video_grid_thw=[f.grid() for f in videos],
        image_grid_thw=[f.grid() for f in images] or None,
        second_per_grid_ts=time_scales(config, [f.scalar("second_per_grid_ts", "fiu", False) for f in videos]),
    )
    return prompt, placeholders


class EvsRecompute:
    """One request's ``recompute_mrope_positions``: a `PrunedPrompt` and the
    (offset, length) of every multimodal item in it (vLLM's placeholder
    ranges, ``PlaceholderRange`` objects or pairs), in prompt order."""

    def __init__(self, prompt: PrunedPrompt, placeholders) -> None:
        if not isinstance(prompt, PrunedPrompt):
            raise TypeError(f"prompt: expected an mrope_tracker.evs.PrunedPrompt, got {type(prompt).__name__}")
        if isinstance(placeholders, (str, bytes)) or not hasattr(placeholders, "__len__"):
            raise TypeError(f"placeholders: expected a sequence of (offset, length), got {describe(placeholders)}")
        ranges = [_placeholder(p, i) for i, p in enumerate(placeholders)]
        end = 0
        for i, (offset, length) in enumerate(ranges):
            if offset < end or offset + length > prompt.num_tokens:
                raise ValueError(
                    f"placeholders[{i}]: expected a range in [{end}, {prompt.num_tokens}] after the one before, "
                    f"got ({offset}, {length})"
                )
            end = offset + length
        self.prompt = prompt
        self.placeholders = ranges
        self.extra = NUM_EXTRA_COLUMNS[prompt.config.family]
        self.video_of_item: list[int | None] = [None] * len(ranges)
        for k, (start, stop) in enumerate(zip(prompt.video_starts, prompt.video_ends)):
            inside = [i for i, (o, n) in enumerate(ranges) if o <= start and stop <= o + n]
            if len(inside) != 1:
                raise ValueError(
                    f"placeholders: expected one range holding video {k}'s tokens [{start}, {stop}), got {len(inside)}"
                )
            self.video_of_item[inside[0]] = k
        # text rows of video k's span before each frame's grid (Qwen3-VL's timestamps and markers)
        self.text_before_frame = []
        for k, spans in enumerate(prompt.grid_spans):
            item = self.video_of_item.index(k)
            start = ranges[item][0] + spans[0][0] - prompt.video_starts[k]  # the span's start, unpruned
            size = prompt.frame_sizes[k]
            self.text_before_frame.append([s - start - f * size for f, (s, _) in enumerate(spans)])

    @classmethod
    def from_features(cls, config, token_ids, mm_features) -> EvsRecompute:
        """Built from a request's prompt ids and vLLM's multimodal features
        (`pruned_prompt_from_features`); a request without a video has
        nothing to recompute and is refused."""
        prompt, placeholders = pruned_prompt_from_features(config, token_ids, mm_features)
        if prompt is None:
            raise ValueError("mm_features: expected at least one video (EVS prunes videos), got none")
        return cls(prompt, placeholders)

    def recompute_mrope_positions(self, input_ids, multimodal_embeddings, mrope_positions, num_computed_tokens):
        """(embeddings without the extra channels, the prompt's positions
        with those from `num_computed_tokens` on rewritten, delta)."""
        n = self.prompt.num_tokens
        if not hasattr(input_ids, "__len__") or len(input_ids) != n:
            raise ValueError(f"input_ids: expected the prompt's {n} token ids, got {describe(input_ids)}")
        if not isinstance(mrope_positions, torch.Tensor) or tuple(mrope_positions.shape) != (3, n):
            raise ValueError(f"mrope_positions: expected a (3, {n}) tensor, got {describe(mrope_positions)}")
        computed = as_index(num_computed_tokens, "num_computed_tokens", minimum=0)
        if computed >= n:
            raise ValueError(f"num_computed_tokens: expected a prefill still running (< {n}), got {computed}")
        if isinstance(multimodal_embeddings, torch.Tensor) or not hasattr(multimodal_embeddings, "__len__"):
            raise TypeError(
                f"multimodal_embeddings: expected a sequence of 2-D tensors, got {describe(multimodal_embeddings)}"
            )
        items = [i for i, (o, length) in enumerate(self.placeholders) if o + length > computed]
        if len(multimodal_embeddings) > len(items):
            raise ValueError(
                f"multimodal_embeddings: expected at most {len(items)} items (those not yet computed), "
                f"got {len(multimodal_embeddings)}"
            )
        masks: list = [None] * self.prompt.num_videos  # a video the call holds no row of: a stand-in mask
        stripped = []
        for j, (embedding, item) in enumerate(zip(multimodal_embeddings, items)):
            name = f"multimodal_embeddings[{j}]"
            if not isinstance(embedding, torch.Tensor) or embedding.ndim != 2 or embedding.shape[1] <= self.extra:
                raise ValueError(
                    f"{name}: expected a 2-D tensor with more than {self.extra} columns, got {describe(embedding)}"
                )
            offset, length = self.placeholders[item]
            first = max(computed - offset, 0)
            if first + embedding.shape[0] > length:
                raise ValueError(
                    f"{name}: expected at most {length - first} rows (placeholder {item} from row {first}), "
                    f"got {embedding.shape[0]}"
                )
            stripped.append(embedding.narrow(1, 0, embedding.shape[1] - self.extra))
            k = self.video_of_item[item]
            if k is not None and embedding.shape[0] > 0:
                masks[k] = self._chunk_mask(k, first, embedding, name)
        layout = self.prompt.layout([self.prompt.stand_in_mask(k) if m is None else m for k, m in enumerate(masks)])
        rewritten = torch.from_numpy(layout.positions(computed, n))
        if computed == 0:  # a whole prompt (vLLM's one-shot prefill): nothing to keep, and the layout knows its delta
            return stripped, rewritten.to(mrope_positions.device, mrope_positions.dtype), layout.delta
        positions = mrope_positions.clone()
        positions[:, computed:] = rewritten.to(positions.device)
        delta = int(positions.max()) + 1 - n
        return stripped, positions, delta

    def _chunk_mask(self, k: int, first: int, embedding: torch.Tensor, name: str) -> np.ndarray:
        """A mask for video k that agrees with the chunk's rows, which start at
        row `first` of its placeholder."""
        columns = embedding.narrow(1, embedding.shape[1] - self.extra, self.extra).to(torch.float32).cpu().numpy()
        digits = columns[:, :DIGITS].astype(np.int64)
        # digits: whole numbers in [0, DIGIT_BASE) (no bit above the lowest 8), then the tag
        if (
            (digits != columns[:, :DIGITS]).any()
            or (digits & ~(DIGIT_BASE - 1)).any()
            or (columns[:, DIGITS] != TAG).any()
        ):
            raise ValueError(f"{name}: expected identity digits written by write_identity_columns, got other values")
        identity = digits @ DIGIT_WEIGHTS
        total = self.prompt.num_frames[k] * self.prompt.frame_sizes[k]
        if self.extra == 4:  # Qwen2.5-VL: the placeholder is the video tokens alone
            is_video, kept, text_before = None, identity, 0
        else:
            is_video = columns[:, -1] != 0
            kept = identity[is_video]
        if kept.shape[0] and ((kept[1:] <= kept[:-1]).any() or kept[0] < 0 or kept[-1] >= total):
            raise ValueError(f"{name}: expected increasing grid indices in [0, {total}), got {kept[:8].tolist()}...")
        if is_video is not None:
            text_before = self._text_before(k, is_video, identity, kept, name)
        before = first - text_before  # the video's kept tokens before the chunk
        after = self.prompt.num_kept[k] - before - kept.shape[0]
        limit_before = int(kept[0]) if kept.shape[0] else total
        room_after = total - 1 - int(kept[-1]) if kept.shape[0] else total - before
        if before < 0 or before > limit_before or after < 0 or after > room_after:
            raise ValueError(
                f"{name}: its rows do not fit video {k}'s {self.prompt.num_kept[k]} kept tokens from row {first} "
                f"({before} kept before them, {after} after)"
            )
        mask = np.zeros(total, np.bool_)
        mask[:before] = True
        mask[kept] = True
        if after:
            mask[total - after :] = True
        return mask

    def _text_before(self, k: int, is_video: np.ndarray, identity: np.ndarray, kept: np.ndarray, name: str) -> int:
        """Qwen3-VL: how many of video k's span text rows precede the chunk,
        checked against the text rows' ordinals in it."""
        if is_video[0]:
            text_before = self.text_before_frame[k][int(kept[0]) // self.prompt.frame_sizes[k]]
        else:
            text_before = int(identity[0])
        text = identity[~is_video]  # the span's text rows are numbered on from those before the chunk
        span_text = self.placeholders[self.video_of_item.index(k)][1] - self.prompt.num_kept[k]
        if (text != text_before + np.arange(text.shape[0])).any() or text_before + text.shape[0] > span_text:
            raise ValueError(
                f"{name}: expected the span's text rows numbered {text_before} on, below {span_text}, "
                f"got {text[:8].tolist()}"
            )
        return text_before
