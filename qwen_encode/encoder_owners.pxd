# Cython's types for encoder_owners.py, compiled at install time (setup.py): the IDs and the
# arrays made as contiguous C arrays, the batch's columns as lists, counters as C integers. The
# loops index without bounds checks (encoder_owners.py's first line): _fits checks first.
import cython


@cython.locals(
    rows=Py_ssize_t,
    pos=Py_ssize_t,
    k=Py_ssize_t,
    h=Py_ssize_t,
    r=Py_ssize_t,
    run=Py_ssize_t,
    start=Py_ssize_t,
    end=Py_ssize_t,
    last=Py_ssize_t,
    size=Py_ssize_t,
    firsts=list,
    turn=list,
    out_ids=cython.int[::1],
    out_bounds=Py_ssize_t[::1],
    out_turn=cython.int[::1],
    out_trained=cython.uchar[::1],
    counts=Py_ssize_t[::1],
)
cpdef object _owners(
    const int[::1] ids,
    list bounds,
    int floor,
    tuple columns,
    list heads,
    list head_runs,
    Py_ssize_t runs,
)


@cython.locals(rows=Py_ssize_t, r=Py_ssize_t, size=Py_ssize_t, kept=Py_ssize_t)
cpdef Py_ssize_t _fits(
    Py_ssize_t count, list bounds, tuple columns, list heads, list head_runs, Py_ssize_t runs
) except -2


@cython.locals(
    expected=list,
    marker_runs=list,
    turn=list,
    trained=list,
    t=Py_ssize_t,
    value=cython.int,
    want=cython.int,
    run=Py_ssize_t,
    after=Py_ssize_t,
    text=Py_ssize_t,
    text_start=Py_ssize_t,
    text_turn=cython.int,
    text_trained=cython.uchar,
)
cpdef Py_ssize_t _owned_row(
    const int[::1] ids,
    Py_ssize_t start,
    Py_ssize_t end,
    int floor,
    tuple columns,
    Py_ssize_t k,
    Py_ssize_t last,
    int[::1] out_ids,
    int[::1] out_turn,
    unsigned char[::1] out_trained,
    Py_ssize_t[::1] counts,
    Py_ssize_t pos,
) except -2


@cython.locals(j=Py_ssize_t, values="const int[:]")
cpdef Py_ssize_t _put_head(
    int[::1] out_ids, int[::1] out_turn, Py_ssize_t pos, object head, int owner
) except -1
