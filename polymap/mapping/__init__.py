"""The mapping stage: decision space, Farkas linearization, SCIP model and solve."""
