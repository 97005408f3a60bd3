"""Integer codes shared by the kernels and their Python wrappers.

A prompt's *layout* is a table of segments (rows), one int64 row per segment,
in token order, covering the prompt without gaps (see docs/design.md):

    LINEAR  token n of the row sits at base + n on all three rows
            (text, audio, the audio part of an Omni interleave chunk)
    CONST   every token of the row sits at base (Omni's shared bos/eos pair)
    GRID    tokens grid_offset ... grid_offset + len - 1 of a (t', h', w')
            vision grid: (base + tau(f), base + i, base + j)
    GRID_RAW the same tokens at (base + tau(f), i, j): H and W are the raw
            row and column, without the base (Isaac)
    GRID_BITS the grid tokens g0 + b, for each set bit b of the row's three
            64-bit words in order, at (base + tau(f), base + i, base + j):
            a pruned video's kept tokens (EVS), 192 mask bits to a row
    CANVAS  grid token n = grid_offset + k of an h' x w' grid stretched over
            an extent of CH x CW (MiniCPM-V 4.7's canvas): (base,
            top + s(i; h', CH), left + s(j; w', CW)), i = n // w', j = n % w',
            s the float32 `torch.linspace(0, extent - 1, size)` rounded half
            to even (`canvas_coordinate`); a slice is CH = h', CW = w' (s is
            the identity), and a run of tokens at one point (T, H, W) is
            h' = its length, w' = CH = CW = 1
    XD_GRID tokens of an (h', w') image whose every row ends in one extra
            (newline) column, on four or more axes (HunYuan-VL's XD-RoPE):
            base + n on every axis but the last three, then the raw column
            j, the raw row i and the image's ordinal (COL_ORDINAL)

Outputs have num_dims rows (the family's, 3 or more). LINEAR and CONST
rows write every axis; the 3-axis kinds (GRID, GRID_RAW, GRID_BITS) write
T, H, W and repeat T on any axis past the third; XD_GRID rows need
num_dims >= 3.

tau(f) follows the row's tau mode (TAU_* below); the per-row float32 pair
(sp, r) lives in a parallel float32 array.

Module-level ints are compile-time constants for numba.
"""

# --- layout row columns (int64) -------------------------------------------
COL_TOK_START = 0  # first prompt token index of the row
COL_TOK_LEN = 1  # number of tokens in the row
COL_KIND = 2
COL_BASE = 3
COL_GRID_OFFSET = 4  # GRID: index of the row's first token inside the grid
COL_T = 5  # GRID: t' (LLM grid, after merging)
COL_H = 6  # GRID: h'
COL_W = 7  # GRID: w'
COL_SCALED = 8  # GRID: tau mode (TAU_*)
COL_ORDINAL = 8  # XD_GRID: the image's ordinal, its last axis (XD rows have no tau mode)
NUM_COLS = 9

# float32 columns of the parallel scale array
SCALE_SP = 0  # second_per_grid_ts of the video
SCALE_R = 1  # tokens_per_second / position_id_per_seconds
NUM_SCALE_COLS = 2

KIND_LINEAR = 0
KIND_CONST = 1
KIND_GRID = 2
KIND_GRID_RAW = 3  # (base + tau(f), i, j): no base on H and W (Isaac, vLLM 0.33)
KIND_GRID_BITS = 4  # the kept tokens of a pruned grid, chosen by the row's mask bits (EVS)

# --- GRID_BITS rows: COL_BASE and COL_GRID_OFFSET (the grid index of bit 0)
# as in GRID; the grid's h', w' and tau mode packed in one column; then the
# mask, bit b of word k standing for grid token g0 + 64k + b.
COL_BITS_SHAPE = 5  # h' | w' << BITS_SIDE | tau mode << 2 * BITS_SIDE
COL_BITS_WORDS = 6  # first of BITS_WORDS mask words (int64, read as 64 bits)
BITS_WORDS = 3
BITS_PER_ROW = 64 * BITS_WORDS
BITS_SIDE = 24  # bits for h' and for w' in COL_BITS_SHAPE (sides below 2**24)

KIND_XD_GRID = 5  # (base + n, ..., j, i, ordinal): HunYuan-VL's image grid (w' + 1 columns)

# --- CANVAS rows: COL_BASE is T, COL_GRID_OFFSET, COL_H and COL_W as in GRID;
# H and W of the grid's first cell in two more columns; the extent (CH, CW)
# in the float32 columns (whole numbers below 2**24: exact there), which is
# the precision the stretch is computed in.
KIND_CANVAS = 6
COL_CANVAS_TOP = 5  # H of grid cell (0, 0)
COL_CANVAS_LEFT = 8  # W of grid cell (0, 0)
SCALE_CANVAS_H = 0  # CH
SCALE_CANVAS_W = 1  # CW
CANVAS_EXTENT_LIMIT = 2**24

# --- packed config (MRopeConfig.kernel_params, float64) ----------------------
# One float64 array carries the ids (exact below 2**53; -1 for an id the
# family does not have, which no token matches) and the switches a family
# and a semantics preset set, so a kernel call passes one argument for all
# of them. Kernels read switches, never family names.
P_MERGE = 0
P_IMAGE = 1
P_VIDEO = 2  # the video placeholder token (-1 when frames reuse the image token)
P_VISION_START = 3
P_VISION_END = 4
P_AUDIO = 5
P_AUDIO_START = 6
P_AUDIO_END = 7
P_VIDEO_OPEN = 8  # begin-of-video bracket (GLM), else -1
P_VIDEO_CLOSE = 9  # end-of-video bracket (GLM), else -1
P_FRAMES = 10  # 1: every video frame is its own tau = 0 block (Qwen3-VL, GLM)
P_TAU_MODE = 11  # temporal rule of videos: TAU_FRAME, TAU_F32, TAU_F64 or TAU_F32_RATE
P_SCALE_R = 12  # tokens_per_second (exact in float32 and float64)
P_AV_PAIR = 13  # audio-in-video bos/eos pairs: 0 shared position, 1 consecutive
P_AV_EOS = 14  # eos after: 0 the block's last run, 1 the whole block
P_NEXT_RULE = 15  # after a vision block: NEXT_MAX (R-max) or NEXT_HW (R-hw)
P_AV_SHIFT = 16  # 1: vLLM 0.33's audio-in-video (positions from audio_start, no pairs)
P_CHUNK = 17  # Qwen2.5-Omni interleave chunk in positions (0 when none)
P_AV_MERGE = 18  # 1: vLLM 0.33's Qwen3-Omni audio-in-video (merge on truncated tau)
P_SP_DEFAULT = 19  # second_per_grid_ts of a video given none; -1: the family takes no time scale
P_SP_TRUNC = 20  # 1: second_per_grid_ts truncated to an integer first (transformers 4.57)
# 1: images are GRID_RAW rows, the next base is 1 + the block's largest
# position, and text after the last item resumes at its T + 1 (Isaac, vLLM 0.33)
P_RAW_SPATIAL = 21
P_VIDEO_T_MERGE = 22  # a video's t' = t // this (ERNIE-4.5-VL's temporal_conv_size; 1 elsewhere)
# 1: an image is one extra token, its XD_GRID of h' rows of w' + 1 tokens, one
# extra token, every token outside the grid sequential (HunYuan-VL)
P_XD_IMAGES = 23
P_ORDINAL_BASE = 24  # XD images: the first image's ordinal (0; transformers' batches count across rows)
P_AFTER_START = 25  # 1: every image and video run must follow vision_start (transformers 4.57, SGLang 0.5: D13)
NUM_PARAMS = 26

TAU_FRAME = 0  # tau(f) = f
TAU_F32 = 1  # trunc(float32(float32(f) * sp) * r), as torch computes it
TAU_F64 = 2  # trunc(float64(f) * (float64(sp) * float64(r))), as vLLM 0.33 does
TAU_F32_RATE = 3  # trunc(float32(float32(f) * float32(sp * r))), as transformers 5 does

NEXT_MAX = 0  # next base = 1 + the block's largest position
NEXT_HW = 1  # next base = s + max(h', w') (transformers 5)

# --- modality codes used by the range-based builder -------------------------
MOD_IMAGE = 0
MOD_VIDEO = 1
MOD_AUDIO = 2

# --- error codes returned by the builder kernels ----------------------------
# A kernel returns (code, a, b, c); the wrapper turns them into a message
# (see ..inputs.layout_error). Codes are never raised inside nopython code.
OK = 0
ERR_PLACEHOLDER_SHORT = 2  # a: modality, b: item index, c: token index of the mismatch
ERR_CUT_OFF = 3  # a: modality, b: item index, c: tokens still missing
ERR_EXTRA_ITEM = 4  # a: modality, b: token index of the unmatched placeholder
ERR_MISSING_ITEMS = 5  # a: modality, b: items consumed, c: items given
ERR_AV_NOT_IN_BLOCK = 6  # a: video index, b: token index
ERR_AV_NO_AUDIO = 7  # a: video index
ERR_AV_BAD_TOKEN = 8  # a: video index, b: token index, c: expected token id
ERR_AV_CUT_OFF = 9  # a: video index, b: tokens still missing
ERR_RANGE_OVERLAP = 10  # a: modality, b: item index, c: previous end
ERR_RANGE_OUT = 11  # a: modality, b: item index, c: range end
ERR_RANGE_LENGTH = 12  # a: modality, b: item index, c: expected length
ERR_AV_RANGE_CONTEXT = 13  # a: video index, b: offset (needs 2 tokens before and after)
ERR_GRID_DIM = 14  # a: modality, b: item index, c: column (0 t, 1 h, 2 w) not positive
ERR_GRID_MERGE = 15  # a: modality, b: item index, c: column not divisible by the merge size
ERR_IMAGE_T = 16  # a: image index, b: t
ERR_SP_VALUE = 17  # a: video index (NaN, infinite or negative)
ERR_TAU_OVERFLOW = 18  # a: video index (temporal index past 2**31)
ERR_AUDIO_SHORT = 19  # a: audio index, b: tokens (fewer than one)
ERR_RANGE_NEGATIVE = 20  # a: modality, b: item index, c: bad value
ERR_AV_COUNT = 21  # a: video index, b: video tokens found, c: audio tokens found, d: audio expected
ERR_VIDEO_OPEN = 22  # a: video index, b: token index of the bracket, c: frames seen
ERR_VIDEO_T_MERGE = 23  # a: video index, b: t (not divisible by the temporal merge size)
ERR_XD_RUN = 24  # a: image index, b: its first token (XD images: the run of image tokens goes on past it)
ERR_NO_VISION_START = 25  # a: modality, b: item index, c: token index of the run (P_AFTER_START)
