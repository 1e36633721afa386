# Cython's types for encoder_owners.py, compiled at install time (setup.py): the IDs and the
# arrays made as C arrays, the batch's columns as lists, counters as C integers.
import cython


@cython.locals(
    rows=Py_ssize_t,
    size=Py_ssize_t,
    pos=Py_ssize_t,
    k=Py_ssize_t,
    h=Py_ssize_t,
    r=Py_ssize_t,
    start=Py_ssize_t,
    end=Py_ssize_t,
    last=Py_ssize_t,
    t=Py_ssize_t,
    value=cython.int,
    run=Py_ssize_t,
    text_run=Py_ssize_t,
    text_turn=cython.int,
    text_trained=cython.uchar,
    out_ids=cython.int[:],
    out_bounds=Py_ssize_t[:],
    out_turn=cython.int[:],
    out_trained=cython.uchar[:],
    counts=Py_ssize_t[:],
    firsts=list,
    expected=list,
    marker_runs=list,
    turn=list,
    trained=list,
)
cpdef object _owners(
    const int[:] ids,
    list bounds,
    int floor,
    tuple columns,
    list heads,
    list head_runs,
    Py_ssize_t runs,
)


@cython.locals(j=Py_ssize_t, values="const int[:]")
cpdef Py_ssize_t _put_head(
    int[:] out_ids,
    int[:] out_turn,
    Py_ssize_t pos,
    object head,
    int owner,
) except -1
