//! API-level tests of a whole reconcile (observe from reflector stores →
//! plan → apply) against a mocked API server: every request's method, path,
//! query (field manager, force) and body is recorded and asserted, and a
//! reconcile with nothing to change must send no request at all. The
//! document write is conditioned on the ConfigMap the reconcile observed: a
//! create (POST) when there was none, else an apply carrying its
//! resourceVersion; a 409 on either stops the reconcile before anything that
//! depends on the document.
//!
//! The mock API server is in `mock`, the stores and the reconcile run in
//! `harness`, what each request must look like in `asserts`; the tests, by
//! theme, in `publish`, `idle`, `finalizer` and `configmap`.

mod asserts;
mod configmap;
mod finalizer;
mod harness;
mod idle;
mod mock;
mod publish;
