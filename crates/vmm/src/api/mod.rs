//! The REST API: HTTP/1.1 on a Unix socket, on its own thread, turning requests into
//! [`command::ApiCommand`]s for the control thread.

pub mod command;
