"""A vLLM-V1-shaped model runner loop with mrope_tracker doing the M-RoPE positions.

It shows where each call goes in a runner that receives, every step, the
scheduler's output: which requests run, how many tokens each, and how many
each has computed (`num_computed_tokens`, the scheduler's own count):

- admission from vLLM's multimodal features (`layout_from_features`, then
  `add_request_layout`), with a prefix-cache hit;
- each step: one `prepare_slots` call with the int32 arrays a runner keeps;
- a speculative-decoding rejection: the scheduler simply reports a lower
  `num_computed_tokens`, no rollback call;
- preemption and resumption with the generated tokens cached (admission
  with `num_computed_tokens` past the prompt);
- removal.

Every step's positions are checked against `prompt_positions` (index +
delta past the prompt), so running it is also a test. CPU by default, CUDA
when present: ``python examples/model_runner.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import torch

from mrope_tracker import MRopeConfig, PositionTracker, prompt_positions, warmup
from mrope_tracker.vllm import layout_from_features

# --- stand-ins with the attributes of vLLM 0.33's MultiModalFeatureSpec --------


@dataclass
class PlaceholderRange:
    offset: int
    length: int
    is_embed: torch.Tensor | None = None


@dataclass
class FieldElem:
    data: object


@dataclass
class Feature:
    modality: str
    mm_position: PlaceholderRange
    data: dict = field(default_factory=dict)


@dataclass
class Request:
    req_id: str
    prompt: list[int]
    features: list[Feature]
    output: list[int] = field(default_factory=list)


# --- the runner ---------------------------------------------------------------


class Runner:
    """The M-RoPE part of a model runner: request state in, positions out."""

    def __init__(self, config: MRopeConfig, max_num_reqs: int, max_num_batched_tokens: int, device: str):
        self.config = config
        self.tracker = PositionTracker(
            config, max_num_reqs=max_num_reqs, max_num_batched_tokens=max_num_batched_tokens, device=device
        )
        # the input batch's per-step arrays, int32 as vLLM keeps them: [max_num_reqs]
        self.slots = np.zeros(max_num_reqs, np.int32)
        self.num_scheduled = np.zeros(max_num_reqs, np.int32)
        self.num_computed = np.zeros(max_num_reqs, np.int32)

    def add_request(self, request: Request, num_computed_tokens: int) -> None:
        """_update_states: a new (or resumed) request. The layout is O(items);
        the cached prefix (and cached generated tokens) cost nothing."""
        num_tokens = len(request.prompt)
        layout = layout_from_features(self.config, num_tokens, request.features)
        self.tracker.add_request_layout(request.req_id, layout, num_computed_tokens=num_computed_tokens)

    def remove_request(self, req_id: str) -> None:
        self.tracker.remove_request(req_id)

    def prepare_positions(self, scheduled: list[tuple[str, int, int]]) -> torch.Tensor:
        """_prepare_inputs: (req_id, num_scheduled_tokens, num_computed_tokens)
        per request, in batch order -> the step's (3, total) positions."""
        n = len(scheduled)
        for b, (req_id, count, computed) in enumerate(scheduled):
            self.slots[b] = self.tracker.slot(req_id)  # a real runner keeps slots in its input batch
            self.num_scheduled[b] = count
            self.num_computed[b] = computed
        return self.tracker.prepare_slots(self.slots[:n], self.num_scheduled[:n], self.num_computed[:n])


# --- a scripted scheduler -------------------------------------------------------


def _qwen25_vl_request(config: MRopeConfig, req_id: str) -> Request:
    """Text, a 224x224 image (8x8 merged patches), text."""
    vs, ve, img = config.vision_start_token_id, config.vision_end_token_id, config.image_token_id
    prompt = [11] * 20 + [vs] + [img] * 64 + [ve] + [12] * 30
    image = Feature("image", PlaceholderRange(21, 64), {"image_grid_thw": FieldElem(torch.tensor([1, 16, 16]))})
    return Request(req_id, prompt, [image])


def _expected(config: MRopeConfig, request: Request, start: int, count: int) -> np.ndarray:
    """The reference answer: prompt positions, then index + delta."""
    positions, delta = prompt_positions(config, request.prompt, image_grid_thw=[[1, 16, 16]])
    index = np.arange(start, start + count)
    out = np.empty((3, count), np.int64)
    in_prompt = index < positions.shape[1]
    out[:, in_prompt] = positions[:, index[in_prompt]]
    out[:, ~in_prompt] = index[~in_prompt] + delta
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    published = {  # Qwen2.5-VL-7B's config.json, trimmed to what decides positions
        "model_type": "qwen2_5_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    }
    config = MRopeConfig.from_hf_config(published, semantics="vllm-0.33")
    warmup()  # at engine start, not on the first request
    runner = Runner(config, max_num_reqs=8, max_num_batched_tokens=256, device=args.device)
    a, b = _qwen25_vl_request(config, "a"), _qwen25_vl_request(config, "b")
    computed = {"a": 0, "b": 48}  # the scheduler's counts; b starts with a 48-token prefix-cache hit

    def step(plan: dict[str, int], note: str) -> None:
        scheduled = [(rid, n, computed[rid]) for rid, n in plan.items()]
        positions = runner.prepare_positions(scheduled).cpu().numpy()
        col = 0
        for rid, n, start in scheduled:
            request = a if rid == "a" else b
            np.testing.assert_array_equal(positions[:, col : col + n], _expected(config, request, start, n))
            col += n
            computed[rid] = start + n
        print(f"{note:52s} positions {positions.shape}, a at {computed['a']}, b at {computed.get('b')}")

    runner.add_request(a, num_computed_tokens=computed["a"])
    runner.add_request(b, num_computed_tokens=computed["b"])
    step({"a": 100, "b": 60}, "chunked prefill: a from 0, b after its cache hit")
    step({"a": 16, "b": 8}, "a ends its prompt; b ends its prompt")
    step({"a": 1 + 3, "b": 1}, "decode: a with 3 draft tokens, b plain")
    computed["a"] -= 2  # 2 of a's drafts rejected: the scheduler's count says so
    step({"a": 1 + 3, "b": 1}, "after a rejection, the scheduler's count rules")
    # preemption of b: its KV blocks are freed, the request goes back to the queue
    runner.remove_request("b")
    b.output = [7] * (computed["b"] - len(b.prompt))  # the tokens it generated so far
    resumed_at = computed["b"]  # ... all found in the prefix cache on resumption
    runner.add_request(b, num_computed_tokens=resumed_at)
    step({"a": 1, "b": 1}, "b resumed with its generated tokens cached")
    runner.remove_request("a")
    runner.remove_request("b")
    print("ok: every step matched prompt_positions and index + delta")


if __name__ == "__main__":
    main()
