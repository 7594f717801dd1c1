//! Tests of the whole server over a real socket, with a fake control thread.

mod errors;
mod harness;
mod openapi;
mod routes;
mod slow_clients;
mod socket;
