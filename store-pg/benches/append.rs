//! Criterion: one durable append per session, 1 and 8 concurrent sessions
//! (one thread each, each appending to its own session), the PostgreSQL
//! store (`synchronous_commit = on`, a private cluster) against agentstore
//! `Sync` (in a scratch directory on the cluster's file system). An
//! iteration is one append in every session; throughput is in events.
//! `agentstore-pg bench` measures the same interleaved, with 64 sessions,
//! Batch and takeover times; this bench is for trends.
//!
//! Skips with a message when PostgreSQL is not installed (benches are not
//! run in CI).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentstore::session::{Session, SessionOptions};
use agentstore::SessionId;
use agentstore_pg::bench::{message_of_json_size, EVENT_JSON_BYTES};
use agentstore_pg::cluster::{Cluster, ClusterError, ClusterOptions};
use agentstore_pg::PgStore;
use criterion::{BenchmarkId, Criterion, Throughput};

/// An open session of either store.
enum Writer {
    Pg(Box<PgStore>),
    Agent(Box<Session>),
}

impl Writer {
    fn append(&mut self, event: &agentchaos_protocol::event::Event) {
        match self {
            Writer::Pg(s) => {
                s.append(event).expect("PostgreSQL append");
            }
            Writer::Agent(s) => {
                s.append(event.clone()).expect("agentstore append");
            }
        }
    }
}

/// `iters` appends in each of `writers`, concurrently; the wall time.
fn run(writers: &mut [Writer], iters: u64) -> Duration {
    let event = message_of_json_size(EVENT_JSON_BYTES);
    let barrier = Barrier::new(writers.len() + 1);
    std::thread::scope(|scope| {
        for w in writers.iter_mut() {
            let (barrier, event) = (&barrier, &event);
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    w.append(event);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before it returns.
        start
    })
    .elapsed()
}

fn main() {
    let cluster = match Cluster::start(ClusterOptions::default()) {
        Ok(c) => c,
        Err(e @ ClusterError::NotInstalled) => {
            eprintln!("store-pg append bench skipped: {e}");
            return;
        }
        Err(e) => panic!("cannot start a private PostgreSQL cluster: {e}"),
    };
    let scratch = tempfile::Builder::new()
        .prefix("agentstore-pg-criterion-")
        .tempdir()
        .expect("scratch directory");
    let root = scratch.path().join("agentstore");
    std::fs::create_dir(&root).expect("agentstore root");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .without_plots()
        .configure_from_args();
    let mut group = c.benchmark_group("append");
    for sessions in [1usize, 8] {
        group.throughput(Throughput::Elements(sessions as u64));
        for store in ["postgres", "agentstore_sync"] {
            let mut writers: Vec<Writer> = (0..sessions)
                .map(|i| {
                    let name = format!("{store}-{sessions}-{i}");
                    match store {
                        "postgres" => Writer::Pg(Box::new(
                            PgStore::create(
                                &cluster.dsn(),
                                std::path::Path::new("/criterion"),
                                &name,
                                scratch.path(),
                                None,
                            )
                            .expect("create a PostgreSQL session")
                            .0,
                        )),
                        _ => Writer::Agent(Box::new(
                            Session::create(
                                &root,
                                &SessionId::new(&name).expect("session id"),
                                scratch.path(),
                                SessionOptions::default(),
                            )
                            .expect("create an agentstore session"),
                        )),
                    }
                })
                .collect();
            group.bench_function(BenchmarkId::new(store, sessions), |b| {
                b.iter_custom(|iters| run(&mut writers, iters))
            });
        }
    }
    group.finish();
    c.final_summary();
}
