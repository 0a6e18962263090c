//! What the operator's controller tests share beyond the core's fixtures
//! (`shardring_core::fixtures`): the recording mock API server of the
//! API-level tests, [`mock_api`].

pub mod mock_api;
