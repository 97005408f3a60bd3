"""Kernels behind `mrope_tracker.prompt_positions`: one dispatch per call.

Most prompts hold text, images and whole-block videos only. For them,
`_vision_walk` (behind three entry points, by what the prompt is given)
walks the tokens with its state in registers and returns just the delta:
no state array, no layout table, no tuple to box.
It measured 0.40 us against the general builder's 0.86 us for one image,
1.5 us against 2.8 us for ten (one 366-token and one 3,300-token prompt,
output preallocated, 2-core EPYC). Anything else it gives up on, returning
`GAVE_UP` with nothing promised about `out`: audio, a per-frame or bracketed
video, an item it cannot match, a bad grid. The caller then runs the
general builder (`layout_build.build_from_tokens`), which computes what the
fast walk does not handle and explains every error; the positions of the
fast walk equal the general builder's (tests check both against the
reference).

`vision_prompt_positions_from_records` is the same walk for items given as
Python lists: it decodes ``marshal.dumps((image_grid_thw, video_grid_thw,
second_per_grid_ts), 2)`` itself, which costs less than converting the
lists in Python (or, for a prompt given images only, ``marshal.dumps(image_grid_thw, 2)``).
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper_with_gil, inner
from .layout_emit import check_items, grid_tokens, next_special
from .position_rules import block_end, write_grid_hw, write_linear, write_t_checked
from .records import RECORD_NONE, read_int_rows_at, read_real_records_at, sequence_header

# Deltas are at least -len(ids), so this cannot be one.
GAVE_UP = -(2**62)


@inner
def _vision_walk(out, ids, params, image_grid, video_grid, video_sp):
    """Fill out (3, L) for a prompt of text, images and (non-per-frame)
    videos, and return its delta; `GAVE_UP` for anything else."""
    num_tokens = ids.shape[0]
    num_images = image_grid.shape[0]
    num_videos = video_grid.shape[0]
    mode = np.int64(params[C.P_TAU_MODE])
    # second_per_grid_ts: one per video, or none for the family's default;
    # families without a time scale take none (the checked path says so).
    num_sp = video_sp.shape[0]
    default_sp = params[C.P_SP_DEFAULT]
    if (
        num_tokens == 0
        or out.shape[1] != num_tokens
        or image_grid.shape[1] != 3
        or video_grid.shape[1] != 3
        or (num_sp != 0 and (num_sp != num_videos or default_sp < 0))
    ):
        return GAVE_UP
    truncate_sp = params[C.P_SP_TRUNC] != 0
    default_sp32 = np.float32(default_sp if default_sp >= 0 else 1)
    if check_items(params, image_grid, video_grid, video_sp, ids[:0])[0] != C.OK:
        return GAVE_UP
    merge = np.int64(params[C.P_MERGE])
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    video_open = np.int64(params[C.P_VIDEO_OPEN])
    r = np.float32(params[C.P_SCALE_R])
    next_rule = np.int64(params[C.P_NEXT_RULE])
    # Videos are walked here only as whole blocks (Qwen2-VL, Qwen2.5-VL,
    # Omni without audio); the tokens that start anything else stop the walk.
    whole_videos = params[C.P_FRAMES] == 0
    if video_open >= 0:
        s_b, s_c = video_open, np.int64(params[C.P_VIDEO_CLOSE])
    else:
        s_b, s_c = video_id, np.int64(params[C.P_AUDIO])
    one = np.float32(1)
    frame_mode = np.int64(C.TAU_FRAME)
    base = np.int64(0)
    top = np.int64(-1)
    text_start = np.int64(0)
    n_image = 0
    n_video = 0
    i = np.int64(0)
    while True:
        i = next_special(ids, i, image_id, s_b, s_c, s_c)
        if i >= num_tokens:
            break
        tok = ids[i]
        if tok == image_id:
            if n_image >= num_images:
                return GAVE_UP
            t, h, w, size = grid_tokens(image_grid, n_image, merge, num_tokens)
            item_mode, sp, item_r = frame_mode, one, one  # images are never time-scaled
            n_image += 1
        elif tok == video_id and whole_videos and video_open < 0:
            if n_video >= num_videos:
                return GAVE_UP
            t, h, w, size = grid_tokens(video_grid, n_video, merge, num_tokens)
            sp = video_sp[n_video] if num_sp != 0 else default_sp32
            if truncate_sp:  # transformers 4.57 (docs/semantics.md, D2)
                sp = np.trunc(sp)
            item_mode, item_r = mode, r
            n_video += 1
        else:
            return GAVE_UP
        if i + size > num_tokens:
            return GAVE_UP
        if i > text_start:
            write_linear(out, text_start, base, i - text_start)
            base += i - text_start
            # max, not assignment: under R-hw (transformers 5) a video's T
            # row can reach above the text that follows it.
            top = max(top, base - 1)
        if write_t_checked(out, ids, i, base, t, h * w, tok, item_mode, sp, item_r):
            return GAVE_UP
        write_grid_hw(out, i, base, np.int64(0), size, h, w)
        block_top, base = block_end(base, t, h, w, item_mode, sp, item_r, next_rule)
        top = max(top, block_top)
        i += size
        text_start = i
    if n_image != num_images or n_video != num_videos:
        return GAVE_UP
    if num_tokens > text_start:
        write_linear(out, text_start, base, num_tokens - text_start)
        top = max(top, base + num_tokens - text_start - 1)
    return top + 1 - num_tokens


# Entry points by what the prompt carries: each array argument costs ~35-65
# ns of dispatch, a good part of a short prompt's whole call. They keep the
# GIL: releasing and retaking it costs as much again, and a call is over in
# microseconds. Each entry point also compiles the whole walk again (about
# 1 s of a cold start), so a text prompt takes the image one with an empty
# grid: one more array argument, 0.04 us of a 1.8 us call (measured).


@helper_with_gil
def image_prompt_positions(out, ids, params, image_grid):
    """`_vision_walk` for a prompt given images only, or none (an empty grid)."""
    return _vision_walk(out, ids, params, image_grid, image_grid[:0], params.view(np.float32)[:0])


@helper_with_gil
def vision_prompt_positions(out, ids, params, image_grid, video_grid, video_sp):
    """`_vision_walk` for a prompt given videos (and perhaps images)."""
    return _vision_walk(out, ids, params, image_grid, video_grid, video_sp)


# Room for the decoded items of `vision_prompt_positions_from_records`: a
# prompt with more items than fit takes the caller's other path.
RECORDS_SCRATCH_SIZE = 4096


@helper_with_gil
def vision_prompt_positions_from_records(out, ids, params, records, scratch, images_only):
    """`_vision_walk` with `records` the bytes of ``marshal.dumps((image_grid_thw,
    video_grid_thw, second_per_grid_ts), 2)``: grids as lists or tuples of
    (t, h, w) lists or tuples of plain ints, times as a list or tuple of
    plain ints and floats, each perhaps None.

    With `images_only` true, `records` is ``marshal.dumps(image_grid_thw, 2)``
    alone. One image given as a list is the most common multimodal prompt,
    and leaving out the wrapping tuple and its two None records measured
    0.1-0.2 us of a 2-3 us call (2-core EPYC). It is a flag rather than an
    entry point of its own: each entry point compiles the whole walk again
    (about 1 s of a cold start).

    The items are decoded into `scratch` (int64): the caller's module-level
    buffer, safe to share because this kernel keeps the GIL. An allocation
    here would need numba's runtime, which costs more per call (a reference
    holder for every array argument) than the rest of a short prompt."""
    if images_only:
        num_images = sequence_header(records, np.int64(0))
        if num_images < 0 or 3 * num_images > scratch.shape[0]:
            return GAVE_UP
        image_grid = scratch[: 3 * num_images].reshape((num_images, 3))
        if read_int_rows_at(records, np.int64(0), image_grid) != len(records):
            return GAVE_UP
        return _vision_walk(out, ids, params, image_grid, image_grid[:0], params.view(np.float32)[:0])
    if sequence_header(records, np.int64(0)) != 3:
        return GAVE_UP
    # A grid record of n valid rows takes 5 + 20 n bytes, so the offsets of
    # the records that follow are known before any row is read.
    image_at = np.int64(5)
    num_images = sequence_header(records, image_at)
    if num_images < 0:
        return GAVE_UP
    video_at = image_at + (1 if records[image_at] == RECORD_NONE else 5 + 20 * num_images)
    num_videos = sequence_header(records, video_at)
    num_rows = num_images + num_videos
    if num_videos < 0 or 3 * num_rows + 2 * num_videos > scratch.shape[0]:
        return GAVE_UP
    sp_at = video_at + (1 if records[video_at] == RECORD_NONE else 5 + 20 * num_videos)
    rows = scratch[: 3 * num_rows].reshape((num_rows, 3))
    image_grid = rows[:num_images]
    video_grid = rows[num_images:]
    if records[image_at] != RECORD_NONE and read_int_rows_at(records, image_at, image_grid) != video_at:
        return GAVE_UP
    if records[video_at] != RECORD_NONE and read_int_rows_at(records, video_at, video_grid) != sp_at:
        return GAVE_UP
    video_sp = scratch[3 * num_rows + num_videos : 3 * num_rows + 2 * num_videos].view(np.float32)
    if sp_at < len(records) and records[sp_at] == RECORD_NONE:  # the walk takes the family's default
        video_sp = video_sp[:0]
        end = sp_at + 1
    elif params[C.P_SP_DEFAULT] < 0:  # the family takes none: the checked path says so
        return GAVE_UP
    else:
        video_sp = video_sp[:num_videos]
        end = read_real_records_at(records, sp_at, scratch[3 * num_rows : 3 * num_rows + num_videos], video_sp)
    if end != len(records):
        return GAVE_UP
    return _vision_walk(out, ids, params, image_grid, video_grid, video_sp)
