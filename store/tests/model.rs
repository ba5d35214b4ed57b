//! Model-based test: random sequences of append / close / reopen / query
//! against an in-memory Vec of events.

mod common;

use agentstore::{Durability, Event, EventLog, LogOptions, LogReader, Query, Record, Seq};
use proptest::prelude::*;

use common::{paths, sample_event, scratch};

const TYPES: [&str; 5] = [
    "run_started",
    "user_message",
    "tool_call",
    "tool_result",
    "assistant_message",
];

#[derive(Debug, Clone)]
enum Op {
    /// Append one event (reopening first if closed).
    Append(u64),
    /// Append many events in a row: enough to cross index strides.
    AppendMany(u64),
    Close,
    Reopen,
    After {
        seq: u64,
        reader: ReaderKind,
    },
    Range {
        a: u64,
        b: u64,
        inclusive: bool,
        reader: ReaderKind,
    },
    Types {
        mask: u8,
        after: u64,
        reader: ReaderKind,
    },
    LastOfType {
        ty: usize,
        modulus: u64,
        rest: u64,
        reader: ReaderKind,
    },
}

/// Which reader a query uses: each must give the same answers.
#[derive(Debug, Clone, Copy)]
enum ReaderKind {
    /// The writer's own index (falls back to `Indexed` when closed).
    FromLog,
    /// Index built by a streaming pass.
    Indexed,
    /// No index: scan from byte 0.
    Plain,
}

fn reader_kind() -> impl Strategy<Value = ReaderKind> {
    prop_oneof![
        Just(ReaderKind::FromLog),
        Just(ReaderKind::Indexed),
        Just(ReaderKind::Plain)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    // Seqs are drawn past the end too; queries beyond the log must be empty.
    let seq = 0..3000u64;
    prop_oneof![
        8 => any::<u64>().prop_map(Op::Append),
        1 => (0..2600u64).prop_map(Op::AppendMany),
        1 => Just(Op::Close),
        1 => Just(Op::Reopen),
        2 => (seq.clone(), reader_kind()).prop_map(|(seq, reader)| Op::After { seq, reader }),
        2 => (seq.clone(), seq.clone(), any::<bool>(), reader_kind())
            .prop_map(|(a, b, inclusive, reader)| Op::Range { a, b, inclusive, reader }),
        2 => (1u8..32, seq, reader_kind())
            .prop_map(|(mask, after, reader)| Op::Types { mask, after, reader }),
        2 => (0..TYPES.len(), 1u64..4, 0u64..4, reader_kind())
            .prop_map(|(ty, modulus, rest, reader)| Op::LastOfType { ty, modulus, rest, reader }),
    ]
}

struct System {
    _dir: tempfile::TempDir,
    paths: agentstore::SessionPaths,
    log: Option<EventLog>,
    model: Vec<Event>,
}

impl System {
    fn new() -> System {
        let dir = scratch();
        let paths = paths(dir.path(), "model");
        let log = EventLog::create(&paths, Durability::None).unwrap();
        System {
            _dir: dir,
            paths,
            log: Some(log),
            model: Vec::new(),
        }
    }

    fn reopen(&mut self) {
        self.log = None;
        let mut seen = Vec::new();
        let (log, report) = EventLog::open(&self.paths, LogOptions::default(), |_, rec| {
            seen.push(rec.event().cloned().unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(report.repaired, None);
        assert_eq!(report.end.seq, self.model.len() as u64);
        assert_eq!(seen, self.model, "reopen read back something else");
        self.log = Some(log);
    }

    fn append(&mut self, event: Event) {
        if self.log.is_none() {
            self.reopen();
        }
        let acked = self.log.as_ref().unwrap().append(&event).unwrap();
        assert_eq!(acked.seq(), self.model.len() as u64);
        self.model.push(event);
    }

    fn reader(&self, kind: ReaderKind) -> LogReader {
        match (kind, &self.log) {
            (ReaderKind::FromLog, Some(log)) => LogReader::for_log(log),
            (ReaderKind::FromLog | ReaderKind::Indexed, _) => {
                LogReader::indexed(&self.paths).unwrap()
            }
            (ReaderKind::Plain, _) => LogReader::open(&self.paths).unwrap(),
        }
    }

    fn expect(&self, pick: impl Fn(Seq, &Event) -> bool) -> Vec<(Seq, Event)> {
        self.model
            .iter()
            .enumerate()
            .map(|(i, e)| (i as Seq, e.clone()))
            .filter(|(s, e)| pick(*s, e))
            .collect()
    }
}

fn collect(events: agentstore::Events) -> Vec<(Seq, Event)> {
    events
        .map(|r| {
            let rec: Record = r.unwrap();
            (rec.seq, rec.event().cloned().unwrap())
        })
        .collect()
}

fn types_of(mask: u8) -> Vec<&'static str> {
    TYPES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, t)| *t)
        .collect()
}

fn run(ops: Vec<Op>) {
    let mut sys = System::new();
    for op in ops {
        match op {
            Op::Append(i) => sys.append(sample_event(i)),
            Op::AppendMany(n) => {
                let base = sys.model.len() as u64;
                for i in 0..n {
                    sys.append(sample_event(base + i));
                }
            }
            Op::Close => sys.log = None,
            Op::Reopen => sys.reopen(),
            Op::After { seq, reader } => {
                let got = collect(sys.reader(reader).after(seq).unwrap());
                assert_eq!(got, sys.expect(|s, _| s > seq), "after {seq}");
            }
            Op::Range {
                a,
                b,
                inclusive,
                reader,
            } => {
                let r = sys.reader(reader);
                let (got, want) = if inclusive {
                    (
                        collect(r.range(a..=b).unwrap()),
                        sys.expect(|s, _| a <= s && s <= b),
                    )
                } else {
                    (
                        collect(r.range(a..b).unwrap()),
                        sys.expect(|s, _| a <= s && s < b),
                    )
                };
                assert_eq!(got, want, "range {a}..{b} inclusive={inclusive}");
            }
            Op::Types {
                mask,
                after,
                reader,
            } => {
                let types = types_of(mask);
                let query = Query::after(after).types(types.iter().copied());
                let got = collect(sys.reader(reader).events(&query).unwrap());
                let want = sys.expect(|s, e| s > after && types.contains(&e.type_name()));
                assert_eq!(got, want, "types {types:?} after {after}");
            }
            Op::LastOfType {
                ty,
                modulus,
                rest,
                reader,
            } => {
                let got = sys
                    .reader(reader)
                    .last_of_type(TYPES[ty], |rec| rec.seq % modulus == rest)
                    .unwrap()
                    .map(|rec| (rec.seq, rec.event().cloned().unwrap()));
                let want = sys
                    .expect(|s, e| e.type_name() == TYPES[ty] && s % modulus == rest)
                    .pop();
                assert_eq!(
                    got, want,
                    "last {} with seq % {modulus} == {rest}",
                    TYPES[ty]
                );
            }
        }
    }
    // Whatever happened, a final reopen reads back exactly the model.
    sys.reopen();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn log_behaves_like_a_vec(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}

#[test]
fn queries_cross_index_strides() {
    // Deterministic companion to the proptest: 3 strides, every kind of reader.
    let mut ops = vec![Op::AppendMany(3 * 1024 + 5)];
    for reader in [ReaderKind::FromLog, ReaderKind::Indexed, ReaderKind::Plain] {
        for seq in [0, 1023, 1024, 1025, 2047, 2048, 3076, 3077, 3078] {
            ops.push(Op::After { seq, reader });
        }
        ops.push(Op::Range {
            a: 1020,
            b: 2050,
            inclusive: true,
            reader,
        });
    }
    ops.push(Op::Close);
    ops.push(Op::After {
        seq: 2000,
        reader: ReaderKind::FromLog,
    });
    run(ops);
}

#[test]
fn readers_index_what_the_writer_indexed() {
    let mut sys = System::new();
    for i in 0..2100 {
        sys.append(sample_event(i));
    }
    let from_log = LogReader::for_log(sys.log.as_ref().unwrap());
    let built = LogReader::indexed(&sys.paths).unwrap();
    assert_eq!(from_log.index(), built.index());
    assert_eq!(built.index().len(), 3);
    assert_eq!(built.index().seek(2099).seq, 2048);
}
