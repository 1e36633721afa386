# Cython's types for encoder_whole.py, compiled at install time (setup.py): the one-pass layout
# of a prompt's runs (``_columns_loop``, which the compiled module runs) with its lists, index and
# run as C types. Uncompiled, encoder_whole.py runs as it reads (and lays out with builtins).
import cython


@cython.locals(
    texts=list,
    expected=list,
    marker_runs=list,
    turns=list,
    trained=list,
    suspect=list,
    crossing=bint,
    k=Py_ssize_t,
    run=tuple,
    kind=Py_ssize_t,
)
cpdef object _columns_loop(
    object rest, Py_ssize_t base, dict added_ids, object initial, tuple out
)
