"""The device path for vLLM's Model Runner V2: `RopeState`, its rows and its Triton kernel.

`rope_state` (MRV2's state contract), `rows` (layout rows cast for the
device), `triton_step` (the one kernel a step; the only module that imports
triton, and only when a state is built), `staging` (staged device writes).

May import: `core`, `evs`, `tracker`, `kernels`, `families`.
"""
