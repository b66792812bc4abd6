"""Share-group partition assignors (pure, synchronous; KIP-848-shaped interface)."""

from kshare_sidecar.assignors.model import (
    AssignmentSpec,
    Assignor,
    AssignorError,
    GroupAssignment,
    MemberSpec,
    TopicMetadata,
    next_spec,
)
from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.assignors.uniform import UniformAssignor

__all__ = [
    "AssignmentSpec",
    "Assignor",
    "AssignorError",
    "GroupAssignment",
    "MemberSpec",
    "SimpleAssignor",
    "TopicMetadata",
    "UniformAssignor",
    "next_spec",
]
