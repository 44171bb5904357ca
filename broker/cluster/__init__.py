"""Cluster mode (issue #18): several brokers over one shared ``dataDir``, with membership and
namespace-bundle ownership in etcd, lookups that send clients to the owner, and fencing so that
a paused former owner can never acknowledge or expose a write. See docs/CLUSTER.md."""
