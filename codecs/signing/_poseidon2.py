"""Poseidon2 over Goldilocks as Lighter uses it (poseidon_crypto ``poseidon2_goldilocks_plonky2``).

Parameters: width 12, rate 8, S-box x^7, 8 full rounds (4 before, 4 after) and 22 partial rounds;
the external linear layer applies the 4x4 circulant circ(2, 3, 1, 1) to each 4-lane block, then
adds to each lane the sum of its column across the three blocks;
the internal layer is ``s_i <- sum(s) + d_i s_i`` with the Plonky3 diagonal. A permutation starts
with one external layer.

Sponge (``hash_n_to_m_no_pad``): the state starts at zero; each chunk of up to 8 inputs
*overwrites* the first lanes (the rest of the rate keeps its old value; no padding, no length
tag), then the state is permuted; outputs are read from lanes 0..7, permuting again when more than
8 are wanted. An empty input yields zeros (no permutation at all).

Inputs are integers taken mod p: a caller hashing a signed 64-bit value passes its two's
complement (``x & (2^64 - 1)``), as Go's ``GoldilocksField(int64)`` conversion does, and that
64-bit value is then reduced mod p by the field arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ._field import Fp5, P

WIDTH: Final = 12
RATE: Final = 8
ROUNDS_F_HALF: Final = 4
ROUNDS_P: Final = 22

EXTERNAL_CONSTANTS: Final = (
    (
        15492826721047263190,
        11728330187201910315,
        8836021247773420868,
        16777404051263952451,
        5510875212538051896,
        6173089941271892285,
        2927757366422211339,
        10340958981325008808,
        8541987352684552425,
        9739599543776434497,
        15073950188101532019,
        12084856431752384512,
    ),
    (
        4584713381960671270,
        8807052963476652830,
        54136601502601741,
        4872702333905478703,
        5551030319979516287,
        12889366755535460989,
        16329242193178844328,
        412018088475211848,
        10505784623379650541,
        9758812378619434837,
        7421979329386275117,
        375240370024755551,
    ),
    (
        3331431125640721931,
        15684937309956309981,
        578521833432107983,
        14379242000670861838,
        17922409828154900976,
        8153494278429192257,
        15904673920630731971,
        11217863998460634216,
        3301540195510742136,
        9937973023749922003,
        3059102938155026419,
        1895288289490976132,
    ),
    (
        5580912693628927540,
        10064804080494788323,
        9582481583369602410,
        10186259561546797986,
        247426333829703916,
        13193193905461376067,
        6386232593701758044,
        17954717245501896472,
        1531720443376282699,
        2455761864255501970,
        11234429217864304495,
        4746959618548874102,
    ),
    (
        13571697342473846203,
        17477857865056504753,
        15963032953523553760,
        16033593225279635898,
        14252634232868282405,
        8219748254835277737,
        7459165569491914711,
        15855939513193752003,
        16788866461340278896,
        7102224659693946577,
        3024718005636976471,
        13695468978618890430,
    ),
    (
        8214202050877825436,
        2670727992739346204,
        16259532062589659211,
        11869922396257088411,
        3179482916972760137,
        13525476046633427808,
        3217337278042947412,
        14494689598654046340,
        15837379330312175383,
        8029037639801151344,
        2153456285263517937,
        8301106462311849241,
    ),
    (
        13294194396455217955,
        17394768489610594315,
        12847609130464867455,
        14015739446356528640,
        5879251655839607853,
        9747000124977436185,
        8950393546890284269,
        10765765936405694368,
        14695323910334139959,
        16366254691123000864,
        15292774414889043182,
        10910394433429313384,
    ),
    (
        17253424460214596184,
        3442854447664030446,
        3005570425335613727,
        10859158614900201063,
        9763230642109343539,
        6647722546511515039,
        909012944955815706,
        18101204076790399111,
        11588128829349125809,
        15863878496612806566,
        5201119062417750399,
        176665553780565743,
    ),
)
INTERNAL_CONSTANTS: Final = (
    11921381764981422944,
    10318423381711320787,
    8291411502347000766,
    229948027109387563,
    9152521390190983261,
    7129306032690285515,
    15395989607365232011,
    8641397269074305925,
    17256848792241043600,
    6046475228902245682,
    12041608676381094092,
    12785542378683951657,
    14546032085337914034,
    3304199118235116851,
    16499627707072547655,
    10386478025625759321,
    13475579315436919170,
    16042710511297532028,
    1411266850385657080,
    9024840976168649958,
    14047056970978379368,
    838728605080212101,
)
MATRIX_DIAG: Final = (
    0xC3B6C08E23BA9300,
    0xD84B5DE94A324FB6,
    0x0D0C371C5B35B84F,
    0x7964F570E7188037,
    0x5DAF18BBD996604B,
    0x6743BC47B9595257,
    0x5528B9362C59BB70,
    0xAC45E25B7127B68B,
    0xA2077D7DFBB606B5,
    0xF3FAAC6FAEE378AE,
    0x0C6388B51545E883,
    0xD27DBB6944917B60,
)


def _external_layer(s: list[int]) -> None:
    for i in range(0, WIDTH, 4):
        a, b, c, d = s[i], s[i + 1], s[i + 2], s[i + 3]
        t01, t23 = a + b, c + d
        t0123 = t01 + t23
        s[i] = t0123 + t01 + b  # 2a + 3b + c + d
        s[i + 1] = t0123 + b + 2 * c  # a + 2b + 3c + d
        s[i + 2] = t0123 + t23 + d  # a + b + 2c + 3d
        s[i + 3] = t0123 + d + 2 * a  # 3a + b + c + 2d
    sums = [s[k] + s[k + 4] + s[k + 8] for k in range(4)]
    for i in range(WIDTH):
        s[i] = (s[i] + sums[i % 4]) % P


def _internal_layer(s: list[int]) -> None:
    total = sum(s)
    for i in range(WIDTH):
        s[i] = (total + MATRIX_DIAG[i] * s[i]) % P


def permute(state: list[int]) -> None:
    """The Poseidon2 permutation, in place, on 12 elements of GF(p)."""
    _external_layer(state)
    for r in range(ROUNDS_F_HALF):
        _full_round(state, EXTERNAL_CONSTANTS[r])
    for c in INTERNAL_CONSTANTS:
        state[0] = pow(state[0] + c, 7, P)
        _internal_layer(state)
    for r in range(ROUNDS_F_HALF, 2 * ROUNDS_F_HALF):
        _full_round(state, EXTERNAL_CONSTANTS[r])


def _full_round(state: list[int], constants: tuple[int, ...]) -> None:
    for i in range(WIDTH):
        state[i] = pow(state[i] + constants[i], 7, P)
    _external_layer(state)


def hash_no_pad(inputs: Iterable[int], outputs: int) -> list[int]:
    """``hash_n_to_m_no_pad``: ``outputs`` field elements from the inputs (each taken mod p)."""
    data = [x % P for x in inputs]
    state = [0] * WIDTH
    for i in range(0, len(data), RATE):
        chunk = data[i : i + RATE]
        state[: len(chunk)] = chunk
        permute(state)
    out: list[int] = []
    while True:
        out.extend(state[: min(RATE, outputs - len(out))])
        if len(out) == outputs:
            return out
        permute(state)


def hash_to_quintic(inputs: Iterable[int]) -> Fp5:
    """``HashToQuinticExtension``: five output elements read as one GF(p^5) element."""
    a, b, c, d, e = hash_no_pad(inputs, 5)
    return (a, b, c, d, e)
