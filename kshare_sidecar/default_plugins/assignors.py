"""Built-in assignors: KIP-932's SimpleAssignor and the balanced UniformAssignor."""

from kshare_sidecar.assignors import SimpleAssignor, UniformAssignor
from kshare_sidecar.hookspecs import hookimpl


@hookimpl
def register_assignors(register):
    register("simple", SimpleAssignor,
             description="KIP-932 SimpleAssignor: hash members onto partitions, round-robin the rest")
    register("uniform", UniformAssignor,
             description="balanced and sticky: partition counts per member differ by at most one")
