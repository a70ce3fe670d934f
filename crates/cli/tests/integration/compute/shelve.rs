//! Shelve, shelve-offload and unshelve.
