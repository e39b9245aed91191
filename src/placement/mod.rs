//! Placement: from the topology, what is allocated, and one container's request, the CPUs,
//! memory nodes, GPUs and NICs that belong together, or a precise reason why not.
