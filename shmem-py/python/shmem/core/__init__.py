"""``shmem.core``: the reference's Python surface (``import shmem.core as core``).

Initialise, allocate symmetric ``Buffer``s (numpy and torch view them
without a copy), move data with one-sided ``put``/``get`` and signals,
synchronise with barriers, streams and handles::

    import numpy as np
    import shmem.core as core

    core.init()                               # launcher env, or one PE
    me, n = core.my_pe(), core.n_pes()
    buf = core.buffer(8 * n)
    slots = np.asarray(buf).view(np.int64)    # this PE's copy, no copy made
    for pe in range(n):
        core.put(buf.numpy(np.int64)[me:me + 1], np.array([me]), pe)
    core.barrier_all()
    assert list(slots) == list(range(n))
    core.free(buf)
    core.finalize()
"""

from .._api import *  # noqa: F401,F403
from .._api import __all__  # noqa: F401
from . import direct  # noqa: F401
