"""``shmem.core.direct``: the rank queries the reference keeps here."""

from .. import _shmem as _n

my_pe = _n.my_pe
n_pes = _n.n_pes

__all__ = ["my_pe", "n_pes"]
