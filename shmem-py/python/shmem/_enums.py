"""Enumerations and constants shared by ``shmem`` and ``shmem.core``.

Values follow the reference (CANN SHMEM / OpenSHMEM numbering), so code that
passes plain integers keeps working.
"""

from enum import IntEnum


class InitStatus(IntEnum):
    """What ``init_status()`` reports."""

    NOT_INITIALIZED = 0
    #: Kept for the reference's numbering; never reported (init is atomic here).
    SHM_CREATED = 1
    INITIALIZED = 2
    INVALID = 3


class MemType(IntEnum):
    """Where a buffer's memory lives. This build has no accelerator: both are
    host memory, and DEVICE_SIDE (the reference's default) is accepted so
    that code written for device memory runs unchanged."""

    HOST_SIDE = 0
    DEVICE_SIDE = 1


class SignalOp(IntEnum):
    """How a signal word is updated (``SHMEM_SIGNAL_SET`` / ``SHMEM_SIGNAL_ADD``)."""

    SIGNAL_SET = 0
    SIGNAL_ADD = 1


class ComparisonType(IntEnum):
    """Comparisons of ``signal_wait``, ``wait_until`` and ``test`` (``SHMEM_CMP_*``)."""

    CMP_EQ = 0
    CMP_NE = 1
    CMP_GT = 2
    CMP_GE = 3
    CMP_LT = 4
    CMP_LE = 5


#: The team of all PEs (the integer the reference uses; a ``Team`` also works).
TEAM_WORLD = 0
#: The PEs on this node.
TEAM_SHARED = 1
#: What a PE left out of a split gets in the reference (here: ``None``).
TEAM_INVALID = -1

SIGNAL_SET = SignalOp.SIGNAL_SET
SIGNAL_ADD = SignalOp.SIGNAL_ADD
CMP_EQ = ComparisonType.CMP_EQ
CMP_NE = ComparisonType.CMP_NE
CMP_GT = ComparisonType.CMP_GT
CMP_GE = ComparisonType.CMP_GE
CMP_LT = ComparisonType.CMP_LT
CMP_LE = ComparisonType.CMP_LE
