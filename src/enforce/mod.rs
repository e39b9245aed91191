//! Enforcement: NRI event handling, container adjustments, the shared pool, persisted state.
