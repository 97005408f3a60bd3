"""Plain torch reference of the M-RoPE position rules.

This module restates the rules of ``/work/shared/spec/mrope-positions.md``
(reference semantics, spec §6.1) as directly as possible, in the style of
transformers 4.x ``get_rope_index`` and vLLM mid-2025
``MRotaryEmbedding._vl_get_input_positions_tensor``: scan the token ids, build
one ``(3, n)`` position tensor per segment with ``arange`` / ``expand`` ops,
``torch.cat`` them, and take ``max()`` for the delta.

It was written from the specification alone (plus `MRopeConfig`), not from the
fast kernels, so that the kernels can be differential-tested against it; it is
also the benchmark baseline. Readability comes first and speed is not a goal,
but nothing is deliberately slow: positions come from per-segment tensor ops
and the Python loops run once per multimodal item or interleave chunk (only
the bool check of list inputs looks at each element).

Families: Qwen2-VL (§2.1), Qwen2.5-VL (§2.2) and the Qwen2.5-Omni thinker
(§2.3, "Reference position semantics" bullets, §6.3).
"""

from __future__ import annotations

import numpy as np
import torch

from .config import MRopeConfig

__all__ = ["audio_token_count", "next_positions", "prompt_positions"]

_INT64_MAX = np.iinfo(np.int64).max


# --------------------------------------------------------------------------
# Input conversion (every message names the argument, the expectation and
# what came; wrong type or dtype -> TypeError, wrong shape or value -> ValueError)
# --------------------------------------------------------------------------


def _describe(value) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _has_bool(seq) -> bool:
    """True when a (nested) list/tuple holds a bool; numpy would silently make it 0/1."""
    return any(
        isinstance(x, (bool, np.bool_)) or (isinstance(x, (list, tuple)) and _has_bool(x)) for x in seq
    )


def _as_tensor(name: str, value, kind: str, ndim: int) -> torch.Tensor:
    """A list/tuple, numpy array or torch tensor as a CPU tensor of integer (kind "int")
    or real (kind "real") numbers with `ndim` dimensions."""
    expected = f"{'integer' if kind == 'int' else 'real'} numbers in a {ndim}-D list, numpy array or torch tensor"
    if isinstance(value, torch.Tensor):
        dtype = value.dtype
        ok = dtype != torch.bool and not dtype.is_complex and (kind == "real" or not dtype.is_floating_point)
        tensor = value.detach().cpu()
    elif isinstance(value, (np.ndarray, list, tuple)):
        if isinstance(value, (list, tuple)) and _has_bool(value):
            raise TypeError(f"{name}: expected {expected}, got a bool element in {_describe(value)}")
        try:  # an empty list carries no dtype: take it as int64
            array = np.asarray(value, dtype=np.int64 if isinstance(value, (list, tuple)) and not value else None)
        except ValueError as exc:  # ragged nested lists
            raise ValueError(f"{name}: expected {expected}, got a ragged sequence ({exc})") from None
        ok = array.dtype.kind in ("iu" if kind == "int" else "iuf")
        if ok and array.dtype.kind == "u" and array.size and int(array.max()) > _INT64_MAX:
            raise ValueError(f"{name}: expected values that fit in int64, got {_describe(value)}")
        if ok and array.dtype.kind in "iu":
            array = array.astype(np.int64, copy=False)
        tensor = torch.from_numpy(array.copy()) if ok else None  # copy: contiguous, own memory
    else:
        raise TypeError(f"{name}: expected {expected}, got {_describe(value)}")
    if not ok:
        raise TypeError(f"{name}: expected {expected}, got {_describe(value)}")
    if tensor.dim() != ndim:
        raise ValueError(f"{name}: expected {expected}, got {tensor.dim()}-D shape {tuple(tensor.shape)}")
    return tensor.to(torch.int64) if kind == "int" else tensor


def _is_empty(value) -> bool:
    """`None` or a sequence/array/tensor with no rows means "no items"."""
    if value is None:
        return True
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.ndim >= 1 and value.shape[0] == 0
    return isinstance(value, (list, tuple)) and len(value) == 0


def _grids(name: str, value, merge: int, *, image: bool) -> list[tuple[int, int, int]]:
    """Validated LLM grids (t', h', w') = (t, h/m, w/m) (spec §1.2, convention 3)."""
    if _is_empty(value):
        return []
    grid = _as_tensor(name, value, "int", 2)
    if grid.shape[1] != 3:
        raise ValueError(f"{name}: expected shape (n, 3) rows of (t, h, w), got shape {tuple(grid.shape)}")
    out = []
    for k, (t, h, w) in enumerate(grid.tolist()):
        where = f"{name}[{k}]"
        if min(t, h, w) < 1:
            raise ValueError(f"{where}: expected every dimension >= 1, got (t, h, w) = {(t, h, w)}")
        if h % merge or w % merge:
            raise ValueError(
                f"{where}: expected h and w divisible by spatial_merge_size {merge}, got (t, h, w) = {(t, h, w)}"
            )
        if image and t != 1:
            raise ValueError(f"{where}: expected t == 1 for an image, got (t, h, w) = {(t, h, w)}")
        out.append((t, h // merge, w // merge))
    return out


def _video_scales(config: MRopeConfig, value, videos: list) -> list[torch.Tensor | None]:
    """Validated seconds per temporal patch `sp` of every video, as 0-d float32 tensors
    (None for Qwen2-VL, whose frames are numbered 0, 1, 2, ...; spec §2.1, §2.2)."""
    name = "second_per_grid_ts"
    if config.tokens_per_second is None:
        if value is not None:
            raise ValueError(f"{name}: expected None for {config.family} (frames are numbered 0, 1, 2, ...), "
                             f"got {_describe(value)}")
        return [None] * len(videos)
    if value is None:
        sp = torch.ones(len(videos), dtype=torch.float32)  # default: 1 second per temporal patch
    elif _is_empty(value):
        sp = torch.zeros(0, dtype=torch.float32)
    else:
        sp = _as_tensor(name, value, "real", 1).to(torch.float32)
    if sp.numel() != len(videos):
        raise ValueError(f"{name}: expected one value per video ({len(videos)}), got {sp.numel()}")
    bad = ~torch.isfinite(sp) | (sp < 0)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise ValueError(f"{name}[{k}]: expected a finite number >= 0 (as float32), got {float(sp[k])}")
    for k, (t, _, _) in enumerate(videos):
        last = torch.tensor(t - 1) * sp[k] * config.tokens_per_second  # same float32 ops as _tau
        if float(last) >= 2**31:
            raise ValueError(f"{name}[{k}]: expected tau(t'-1) = (t'-1) * sp * r below 2**31, "
                             f"got {float(last)} (sp {float(sp[k])} too large)")
    return [sp[k] for k in range(len(videos))]


def _tau(config: MRopeConfig, t: int, sp: torch.Tensor | None) -> torch.Tensor:
    """Temporal index tau(f), f < t', as int64 (spec §1.3).

    Unscaled (Qwen2-VL videos): f. Scaled (Qwen2.5-VL, Omni): trunc(f * sp * r) in
    float32 as transformers / vLLM mid-2025 compute it: int64 arange times a 0-d
    float32 sp gives float32, times the Python float r stays float32 (spec §2.2, T5).
    """
    if sp is None:
        return torch.arange(t)
    return (torch.arange(t) * sp * config.tokens_per_second).long()


def _audio_lengths(config: MRopeConfig, value) -> list[int]:
    """Audio token counts n_a(F) of every audio track, in prompt order (spec §2.3)."""
    name = "audio_feature_lengths"
    if not config.is_omni:
        if not _is_empty(value):
            raise ValueError(f"{name}: expected None or empty for {config.family} (no audio), got {_describe(value)}")
        return []
    if _is_empty(value):
        return []
    counts = []
    for k, frames in enumerate(_as_tensor(name, value, "int", 1).tolist()):
        n = audio_token_count(frames)
        if n < 1:
            raise ValueError(f"{name}[{k}]: expected at least 3 mel frames (one audio token), got {frames}")
        counts.append(n)
    return counts


# --------------------------------------------------------------------------
# Position builders: one (3, n) int64 tensor per segment
# --------------------------------------------------------------------------


def _linear(base: int, n: int) -> torch.Tensor:
    """Text (and Omni audio): base, base+1, ... on all three rows (spec §1.3)."""
    return torch.arange(n).view(1, -1).expand(3, -1) + base


def _constant(value: int, n: int) -> torch.Tensor:
    return torch.full((3, n), value, dtype=torch.int64)


def _vision(s: int, tau: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Block rule (spec §1.3): token k = f*h'w' + i*w' + j sits at (s+tau(f), s+i, s+j)."""
    t = tau.numel()
    rows_t = tau.view(t, 1, 1).expand(t, h, w)
    rows_h = torch.arange(h).view(1, h, 1).expand(t, h, w)
    rows_w = torch.arange(w).view(1, 1, w).expand(t, h, w)
    return torch.stack([rows_t, rows_h, rows_w]).reshape(3, -1) + s


def _chunks(values: torch.Tensor, size: int) -> list[tuple[int, int]]:
    """Chunk bounds [start, end) of a non-decreasing value sequence, as transformers'
    ``get_chunked_index`` walker cuts them (spec §2.3 "HF processor", convention 7).

    The walker visits tokens i = 0, 1, ... with a chunk counter c = 1; when
    values[i] >= c*size it closes the chunk before i and increments c (once per
    token). Because the values are sorted, the next cut is found with one
    searchsorted per chunk instead of one step per token.
    """
    n = values.numel()
    bounds, start, c, i = [], 0, 1, 0
    while True:
        i = max(i, int(torch.searchsorted(values, c * size)))  # first index >= i reaching c*size
        if i >= n:
            break
        bounds.append((start, i))
        start, c, i = i, c + 1, i + 1
    bounds.append((start, n))
    return bounds


def _check_run(ids: torch.Tensor, start: int, n: int, expected, what: str) -> None:
    """Tokens start ... start+n-1 must be the item's placeholders: all `expected` (an id)
    or, for an Omni interleave, the (n,) tensor of ids in layout order."""
    length = ids.numel()
    got = ids[start : min(start + n, length)]
    is_tensor = isinstance(expected, torch.Tensor)
    want = expected[: got.numel()] if is_tensor else expected
    wrong = (got != want).nonzero()
    if wrong.numel():
        q = start + int(wrong[0])
        want_q = int(expected[q - start]) if is_tensor else expected
        raise ValueError(
            f"{what}: expected {n} placeholder tokens from index {start}, got token id {int(ids[q])} at index {q} "
            f"instead of {want_q} (placeholder count does not match the grid)"
        )
    if start + n > length:
        raise ValueError(f"{what}: expected {n} placeholder tokens from index {start}, got the prompt cut off "
                         f"after {length - start}")


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def audio_token_count(num_mel_frames: int) -> int:
    """Audio tokens of a clip with F mel frames: n_a(F) = ((F-1)//2 + 1 - 2)//2 + 1 (spec §2.3).

    Plain formula (F < 3 gives n_a <= 0); `prompt_positions` rejects such clips.
    """
    if isinstance(num_mel_frames, (bool, np.bool_)) or not isinstance(num_mel_frames, (int, np.integer)):
        raise TypeError(f"num_mel_frames: expected an int, got {_describe(num_mel_frames)}")
    frames = int(num_mel_frames)
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def next_positions(delta: int, context_len: int, num_new_tokens: int) -> torch.Tensor:
    """Positions of tokens at absolute indices context_len ... context_len+n-1 past the
    prompt: index + delta on all three rows (spec §1.5). Returns (3, n) int64."""
    for name, value in (("delta", delta), ("context_len", context_len), ("num_new_tokens", num_new_tokens)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {_describe(value)}")
    if context_len < 0 or num_new_tokens < 0:
        raise ValueError(f"context_len, num_new_tokens: expected ints >= 0, got {context_len}, {num_new_tokens}")
    return _linear(int(context_len) + int(delta), int(num_new_tokens)).contiguous()


def prompt_positions(
    config,
    token_ids,
    *,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video=False,
) -> tuple[torch.Tensor, int]:
    """M-RoPE positions of a whole prompt: ((3, L) int64 tensor, delta) (spec §6.2, §6.3).

    `config` is an `MRopeConfig` (or anything `MRopeConfig.from_hf_config` takes).
    Grids are (n, 3) (t, h, w) before merging; `second_per_grid_ts` has one number
    per video; `audio_feature_lengths` one mel-frame count per audio track in
    prompt order (standalone clips and, with `use_audio_in_video`, video tracks).
    """
    config = MRopeConfig.from_hf_config(config)
    ids = _as_tensor("token_ids", token_ids, "int", 1)
    length = ids.numel()
    if length == 0:
        raise ValueError("token_ids: expected a non-empty prompt, got 0 tokens")
    if not isinstance(use_audio_in_video, (bool, np.bool_)):
        raise TypeError(f"use_audio_in_video: expected a bool, got {_describe(use_audio_in_video)}")
    use_audio_in_video = bool(use_audio_in_video)
    if use_audio_in_video and not config.is_omni:
        raise ValueError(f"use_audio_in_video: expected False for {config.family} (no audio), got True")

    merge = config.spatial_merge_size
    images = _grids("image_grid_thw", image_grid_thw, merge, image=True)
    videos = _grids("video_grid_thw", video_grid_thw, merge, image=False)
    video_sps = _video_scales(config, second_per_grid_ts, videos)
    audios = _audio_lengths(config, audio_feature_lengths)

    image_id, video_id, audio_id = config.image_token_id, config.video_token_id, config.audio_token_id
    placeholder_ids = [image_id, video_id] + ([audio_id] if config.is_omni else [])
    placeholder_at = torch.isin(ids, torch.tensor(placeholder_ids)).nonzero().flatten()  # sorted indices
    used = {"image": 0, "video": 0, "audio": 0}
    supply = {"image": len(images), "video": len(videos), "audio": len(audios)}
    arg_of = {"image": "image_grid_thw", "video": "video_grid_thw", "audio": "audio_feature_lengths"}

    def take(kind: str, o: int) -> int:
        """Index of the next item of `kind`; a placeholder with no item left is an error."""
        k = used[kind]
        if k == supply[kind]:
            raise ValueError(f"{arg_of[kind]}: expected an item for the {kind} placeholder at token {o}, "
                             f"got only {supply[kind]} (more {kind} items in the prompt than given)")
        used[kind] += 1
        return k

    segments: list[torch.Tensor] = []
    st, base = 0, 0  # next unconsumed token index, next base position
    while True:
        # Next placeholder at or after st starts the next item of its modality (convention 2).
        k_at = int(torch.searchsorted(placeholder_at, st))
        if k_at == placeholder_at.numel():
            break
        o = int(placeholder_at[k_at])
        token = int(ids[o])

        if token == video_id and use_audio_in_video:
            # Omni audio-in-video block (spec §2.3 reference bullets, §6.3, convention 7):
            # VS AS <interleaved video/audio chunks> AE VE.
            k = take("video", o)
            what = f"video_grid_thw[{k}] (audio in video)"
            if o - 2 < st or int(ids[o - 2]) != config.vision_start_token_id or int(ids[o - 1]) != config.audio_start_token_id:
                raise ValueError(f"{what}: expected vision_start, audio_start before the video placeholder at "
                                 f"token {o}, got token ids {ids[max(o - 2, 0):o].tolist()}")
            if used["audio"] == supply["audio"]:
                raise ValueError(f"audio_feature_lengths: expected an audio track for video {k} at token {o}, "
                                 f"got only {supply['audio']} lengths")
            n_a = audios[used["audio"]]
            used["audio"] += 1
            t, h, w = videos[k]
            if o + t * h * w + n_a + 2 > length:  # before building anything of that size
                raise ValueError(f"{what}: expected {t * h * w} video + {n_a} audio tokens, audio_end, vision_end "
                                 f"from token {o}, got the prompt cut off after {length - o} tokens")
            tau = _tau(config, t, video_sps[k])
            # vision_start is the last token of the text run, at b; audio_start repeats b.
            segments.append(_linear(base, o - 1 - st))
            b = base + (o - 2 - st)
            segments.append(_constant(b, 1))
            s = b + 1
            video_pos = _vision(s, tau, h, w)  # frame-major token order
            audio_pos = _linear(s, n_a)
            # Chunk both streams on their temporal values (video: tau of each token's frame).
            chunk = config.audio_chunk_positions
            video_chunks = _chunks(tau.repeat_interleave(h * w), chunk)
            audio_chunks = _chunks(torch.arange(n_a), chunk)
            pieces, piece_ids = [], []
            for j in range(max(len(video_chunks), len(audio_chunks))):
                for bounds, pos, tok in ((video_chunks, video_pos, video_id), (audio_chunks, audio_pos, audio_id)):
                    if j < len(bounds):
                        a, z = bounds[j]
                        pieces.append(pos[:, a:z])
                        piece_ids.append(torch.full((z - a,), tok, dtype=torch.int64))
            expected = torch.cat(piece_ids)
            n = expected.numel()
            _check_run(ids, o, n, expected, what)
            closing = ids[o + n : o + n + 2].tolist()
            if closing != [config.audio_end_token_id, config.vision_end_token_id]:
                raise ValueError(f"{what}: expected audio_end, vision_end after the interleave at token {o + n}, "
                                 f"got token ids {closing} (block cut off or malformed)")
            segments.extend(pieces)
            # R-last-chunk: audio_end and vision_end share 1 + max of the last appended chunk.
            e = int(pieces[-1].max()) + 1
            segments.append(_constant(e, 2))
            st, base = o + n + 2, e + 1
            continue

        # Text run up to the item, then the item at s (spec §6.2).
        segments.append(_linear(base, o - st))
        s = base + (o - st)
        if token == audio_id:
            # Omni standalone audio: 1-D, continues the text (spec §2.3).
            k = take("audio", o)
            n = audios[k]
            _check_run(ids, o, n, audio_id, f"audio_feature_lengths[{k}]")
            segments.append(_linear(s, n))
            base = s + n
        else:
            kind = "image" if token == image_id else "video"
            k = take(kind, o)
            t, h, w = (images if kind == "image" else videos)[k]
            n = t * h * w
            _check_run(ids, o, n, token, f"{arg_of[kind]}[{k}]")
            # Images: tau = 0 (t' = 1); videos: spec §1.3.
            tau = torch.zeros(1, dtype=torch.int64) if kind == "image" else _tau(config, t, video_sps[k])
            segments.append(_vision(s, tau, h, w))
            # R-max: next base = s + max(tau(t'-1), h'-1, w'-1) + 1 (spec §1.4).
            base = s + max(int(tau[-1]), h - 1, w - 1) + 1
        st = o + n

    for kind in ("image", "video", "audio"):
        if used[kind] != supply[kind]:
            raise ValueError(f"{arg_of[kind]}: expected {supply[kind]} {kind} items in the prompt, "
                             f"got {used[kind]} (fewer items than given)")
    segments.append(_linear(base, length - st))  # trailing text
    positions = torch.cat(segments, dim=1)
    # spec §1.5: delta = max(P) + 1 - L over all rows and tokens.
    delta = int(positions.max()) + 1 - length
    return positions, delta
