//! `weir sql`: the psql-like client, which talks to a weir server over its HTTP API only.
//! (Built in the client issue.)
