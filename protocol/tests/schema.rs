//! The committed schema is what the types generate.

use std::path::Path;

use agentchaos_protocol::schema::{document, COMMITTED_PATH};

#[test]
fn the_committed_schema_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED_PATH);
    let fresh = serde_json::to_string_pretty(&document()).expect("the schema serializes") + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &fresh)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with `UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol`",
            path.display()
        )
    });
    assert!(
        committed == fresh,
        "{} is stale: the protocol types changed since it was generated; regenerate it with `UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol` and commit it",
        path.display()
    );
}

/// The adapter kits ship a copy of the committed schema inside their
/// packages (Python: package data; Node: `src/`), so that each validates
/// the same way wherever it is installed; each must be the same bytes.
/// `UPDATE_SCHEMA=1` rewrites them too.
#[test]
fn the_adapter_kits_ship_the_committed_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = serde_json::to_string_pretty(&document()).expect("the schema serializes") + "\n";
    for copy in [
        "../chaos/adapters/python/agentchaos_adapter/protocol.schema.json",
        "../chaos/adapters/node/src/protocol.schema.json",
    ] {
        let kit = root.join(copy);
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::write(&kit, &fresh)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", kit.display()));
            continue;
        }
        let packaged = std::fs::read_to_string(&kit)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", kit.display()));
        assert!(
            packaged == fresh,
            "{} is not the protocol's schema; regenerate it with `UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol` and commit it",
            kit.display()
        );
    }
}

#[test]
fn every_operation_names_a_reply_body_the_schema_defines() {
    let doc = document();
    for (op, def) in agentchaos_protocol::Request::REPLIES {
        assert_eq!(
            doc["replies"][op]["$ref"],
            format!("#/$defs/{def}"),
            "replies.{op}"
        );
        assert!(
            doc["$defs"][def].is_object(),
            "no $defs entry {def} for {op}"
        );
    }
}
