//! weir's SQL front end: statements, the catalog, and planning through DataFusion into the
//! runtime's dataflow graph. (Built in the streaming SQL issue.)
