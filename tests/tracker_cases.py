"""Small hand-checkable prompts of the PositionTracker tests, in token and range form, and the helpers
the tracker test modules share: a tracker of test capacities, a step's reference positions, and a populated
tracker with a twin to compare against after a refused call.

test_tracker_steps.py, test_tracker_batches.py and test_tracker_bad_input.py use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from spec_cases import omni, omni_toy, qwen2_5_vl, qwen2_vl, tokens
from strategies import audio_tokens, interleave_kinds, tau_values

from mrope_tracker import MRopeConfig, PromptLayout, reference
from mrope_tracker.tracker import PositionTracker

# --- prompts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A prompt in token form and range form, with its multimodal blocks (offset, length)."""

    name: str
    config: MRopeConfig
    ids: np.ndarray
    kwargs: dict
    ranges: dict = field(default_factory=dict)
    blocks: tuple = ()

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[0])

    def reference(self) -> tuple[np.ndarray, int]:
        positions, delta = reference.prompt_positions(self.config, self.ids, **self.kwargs)
        return positions.numpy(), int(delta)

    def add(self, tracker: PositionTracker, req_id, form: str = "tokens", num_computed_tokens: int = 0) -> int:
        if form == "tokens":
            return tracker.add_request(req_id, self.ids, num_computed_tokens=num_computed_tokens, **self.kwargs)
        if form == "ranges":
            return tracker.add_request_from_ranges(
                req_id, self.num_tokens, num_computed_tokens=num_computed_tokens, **self.kwargs, **self.ranges
            )
        if form == "layout_tokens":
            layout = PromptLayout.from_tokens(self.config, self.ids, **self.kwargs)
        else:
            layout = PromptLayout.from_ranges(self.config, self.num_tokens, **self.kwargs, **self.ranges)
        return tracker.add_request_layout(req_id, layout, num_computed_tokens=num_computed_tokens)


def _ids(config, prompt: str) -> np.ndarray:
    return np.array(tokens(config, prompt), dtype=np.int64)


def vl_image() -> Case:
    """Spec T1: Qwen2-VL, one image (1, 4, 6) -> 1x2x3 placeholders at 3..8."""
    c = qwen2_vl()
    return Case(
        "vl_image",
        c,
        _ids(c, "t t VS I*6 VE t t"),
        {"image_grid_thw": [[1, 4, 6]]},
        {"image_ranges": [[3, 6]]},
        ((3, 6),),
    )


def vl_video() -> Case:
    """Qwen2-VL, one video (3, 4, 4) -> 3x2x2 placeholders at 2..13."""
    c = qwen2_vl()
    return Case(
        "vl_video",
        c,
        _ids(c, "t VS V*12 VE t t"),
        {"video_grid_thw": [[3, 4, 4]]},
        {"video_ranges": [[2, 12]]},
        ((2, 12),),
    )


def vl_text(n: int = 7) -> Case:
    c = qwen2_vl()
    return Case(f"vl_text{n}", c, _ids(c, " ".join(["t"] * n)), {})


def vl_images(num_images: int, text: int = 1) -> Case:
    """Qwen2-VL, `num_images` images of 2x2 placeholders, each wrapped and followed by `text` tokens."""
    c = qwen2_vl()
    body = " ".join([f"VS I*4 VE t*{text}"] * num_images)
    ids = _ids(c, "t " + body)
    ranges = [[1 + k * (6 + text) + 1, 4] for k in range(num_images)]
    return Case(
        f"vl_images{num_images}",
        c,
        ids,
        {"image_grid_thw": [[1, 4, 4]] * num_images},
        {"image_ranges": ranges},
        tuple(map(tuple, ranges)),
    )


def vl25_items(num_items: int, text: int = 1) -> Case:
    """Qwen2.5-VL, `num_items` wrapped items alternating a 2x2 image and a 2-frame 2x2 video at
    0.5, 1.3, 2.6 ... s per grid, each followed by `text` tokens."""
    c = qwen2_5_vl()
    words, images, videos, sps, image_ranges, video_ranges = ["t"], [], [], [], [], []
    pos = 1
    for k in range(num_items):
        video = k % 2 == 1
        n = 8 if video else 4
        words.append(f"VS {'V' if video else 'I'}*{n} VE t*{text}")
        (video_ranges if video else image_ranges).append([pos + 1, n])
        if video:
            videos.append([2, 4, 4])
            sps.append([0.5, 1.3, 2.6][(k // 2) % 3])
        else:
            images.append([1, 4, 4])
        pos += n + 2 + text
    kwargs = {}
    if images:
        kwargs["image_grid_thw"] = images
    if videos:
        kwargs.update(video_grid_thw=videos, second_per_grid_ts=sps)
    ranges = {"image_ranges": image_ranges, "video_ranges": video_ranges}
    blocks = tuple(sorted(map(tuple, image_ranges + video_ranges)))
    return Case(f"vl25_items{num_items}", c, _ids(c, " ".join(words)), kwargs, ranges, blocks)


def vl25_video() -> Case:
    """Qwen2.5-VL (r = 2), one video (3, 4, 4) at 1.3 s per grid: tau = 0, 2, 5."""
    c = qwen2_5_vl()
    return Case(
        "vl25_video",
        c,
        _ids(c, "t VS V*12 VE t t"),
        {"video_grid_thw": [[3, 4, 4]], "second_per_grid_ts": [1.3]},
        {"video_ranges": [[2, 12]]},
        ((2, 12),),
    )


def omni_audio_in_video() -> Case:
    """Omni toy config (r = 2, chunk 4), one video (3, 4, 4) carrying 40 mel frames of audio."""
    c = omni_toy()
    t, h, w, frames = 3, 2, 2, 40
    order = interleave_kinds(
        tau_values(t, np.float32(1.0), c.tokens_per_second), h * w, audio_tokens(frames), c.audio_chunk_positions
    )
    block = [c.video_token_id if k == "V" else c.audio_token_id for k in order]
    ids = tokens(c, "t t") + [c.vision_start_token_id, c.audio_start_token_id] + block
    ids += [c.audio_end_token_id, c.vision_end_token_id] + tokens(c, "t")
    kwargs = {
        "video_grid_thw": [[t, 2 * h, 2 * w]],
        "second_per_grid_ts": [1.0],
        "audio_feature_lengths": [frames],
        "use_audio_in_video": True,
    }
    return Case("omni_av", c, np.array(ids, np.int64), kwargs, {"video_ranges": [[4, len(block)]]}, ((4, len(block)),))


def omni_image_audio() -> Case:
    """Omni (published values), an image (1, 4, 4) then a 20-frame (5-token) audio clip."""
    c = omni()
    return Case(
        "omni_mixed",
        c,
        _ids(c, "t VS I*4 VE t AS A*5 AE t"),
        {"image_grid_thw": [[1, 4, 4]], "audio_feature_lengths": [20]},
        {"image_ranges": [[2, 4]], "audio_ranges": [[8, 5]]},
        ((2, 4), (8, 5)),
    )


CASES = [vl_image(), vl_video(), vl25_video(), omni_audio_in_video(), omni_image_audio()]
by_name = pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
FORMS = ["tokens", "ranges", "layout_tokens", "layout_ranges"]


# --- helpers ---------------------------------------------------------------------


def make_tracker(config, **kwargs) -> PositionTracker:
    kwargs.setdefault("max_num_reqs", 4)
    kwargs.setdefault("max_num_batched_tokens", 64)
    return PositionTracker(config, **kwargs)


def expected_step(ref: np.ndarray, delta: int, computed: int, count: int) -> np.ndarray:
    """Reference positions of tokens [computed, computed + count): prompt slice, then index + delta."""
    length = ref.shape[1]
    prompt_part = ref[:, computed : min(computed + count, length)]
    after = np.arange(max(computed, length), computed + count, dtype=np.int64) + delta
    return np.concatenate([prompt_part, np.broadcast_to(after, (3, after.shape[0]))], axis=1)


def as_numpy(out: torch.Tensor) -> np.ndarray:
    return out.cpu().numpy().astype(np.int64)


def assert_positions(out: torch.Tensor, expected: np.ndarray) -> None:
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(as_numpy(out), expected)


def run_steps(tracker, req_id, counts) -> np.ndarray:
    """Prepare `counts` tokens of one request step by step; the concatenated positions."""
    parts = [as_numpy(tracker.prepare([req_id], [n])) for n in counts]
    return np.concatenate(parts, axis=1)


def chunks_from_splits(length: int, splits) -> list[int]:
    bounds = [0, *sorted(set(s for s in splits if 0 < s < length)), length]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def batch_cases():
    return {"a": vl_image(), "b": vl_text(9), "c": vl_video(), "d": vl_images(3)}


IDS = ("a", "b", "c")


def populated(**kwargs) -> PositionTracker:
    """Three Qwen2-VL requests part-way through their prompts (slot 3 free unless max_num_reqs=3)."""
    kwargs.setdefault("max_num_batched_tokens", 16)
    kwargs.setdefault("max_model_len", 40)
    cases = batch_cases()
    tracker = make_tracker(qwen2_vl(), **kwargs)
    for rid in IDS:
        cases[rid].add(tracker, rid)
    tracker.prepare(["a", "b", "c"], [3, 2, 0])
    tracker.prepare(["c", "a"], [4, 1])  # the last step: bad calls below repeat its ids
    return tracker


def assert_same_state(tracker: PositionTracker, twin: PositionTracker) -> None:
    """Same requests, counters and slots, and the next step gives the same positions."""
    tracker.check_invariants()
    assert len(tracker) == len(twin)
    for rid in (*IDS, "x", "zz"):
        assert (rid in tracker) == (rid in twin)
    live = [rid for rid in IDS if rid in twin]
    for rid in live:
        assert tracker.num_computed_tokens(rid) == twin.num_computed_tokens(rid)
        assert tracker.prompt_len(rid) == twin.prompt_len(rid)
        assert tracker.mrope_position_delta(rid) == twin.mrope_position_delta(rid)
        assert tracker.slot(rid) == twin.slot(rid)
    order = live[::-1]
    counts = [4, 5, 6][: len(order)]
    np.testing.assert_array_equal(as_numpy(tracker.prepare(order, counts)), as_numpy(twin.prepare(order, counts)))
