//! The simulated world around the system: the Kubernetes API server, Argo CD and Git.

pub mod apiserver;
