//! The JSON report keeps the shape its committed schema
//! (`chaos/schema/report.schema.json`) promises: real reports of a clean
//! and of a failing campaign validate (trial, probe and power-loss
//! violations, every scorecard verdict), and a report that lost a key or
//! changed format does not.

use crate::campaign;

use std::path::Path;

use serde_json::Value;

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/report.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).unwrap()
}

fn small() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn assert_valid(report: &Value) {
    let errors: Vec<String> = validator()
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_clean_report_fits_the_schema() {
    let (code, report, stdout) = campaign::run(
        &small(),
        &[
            "--trials",
            "3",
            "--restarts",
            "none",
            "--powerloss-states",
            "2",
            "--timings",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["format"], agentchaos::report::REPORT_FORMAT);
    assert!(report["timings"].is_object(), "{stdout}");
    assert_valid(&report);
    let mut lost = report.clone();
    lost["timings"]["total"]["parts"]
        .as_object_mut()
        .unwrap()
        .remove("round_trips");
    assert!(!validator().is_valid(&lost), "a lost timing part is caught");
}

#[test]
fn a_failing_report_fits_the_schema_and_a_broken_one_does_not() {
    let (code, report, stdout) = campaign::run(
        &small(),
        &[
            "--trials",
            "6",
            "--restarts",
            "none",
            "--store-fault",
            "ack-before-fsync",
            "--powerloss-model",
            "weak",
            "--powerloss-states",
            "4",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(!report["violations"].as_array().unwrap().is_empty());
    let power = &report["power_loss"]["scenarios"][0]["violations"];
    assert!(!power.as_array().unwrap().is_empty(), "{stdout}");
    assert_valid(&report);
    // Every violation names its cause; every cause counts the violations
    // that name it, and replays the simplest of their plans.
    let causes = report["causes"].as_array().unwrap();
    assert_eq!(report["cause_count"], causes.len());
    let violations = report["violations"].as_array().unwrap();
    for (id, c) in causes.iter().enumerate() {
        assert_eq!(c["id"], id);
        let reached: Vec<&Value> = violations.iter().filter(|v| v["cause"] == id).collect();
        assert_eq!(c["trials"], reached.len(), "{c}");
        assert!(reached.iter().any(|v| v["plan"] == c["plan"]), "{c}");
    }
    assert!(causes.len() <= violations.len());

    // A row whose probes stopped short, and a probe charged elsewhere
    // (what a store that writes late earns), fit it too.
    let mut short = report.clone();
    short["scorecard"][1] = serde_json::json!({
        "capability": "torn_tail_repair", "claimed": true, "verdict": "not reached",
        "why": "in small (probe rule-parent-missing@op-r-1): not reached", "probes_not_reached": 1,
    });
    short["scorecard"][0]["probes_not_reached"] = 2.into();
    short["scenarios"][0]["probes_not_carried_out"] = serde_json::json!([{
        "probe": "probe:rule-parent-missing@op-r-1", "capability": "branches",
        "why": "not reached: the session lost the 4 event(s)", "charged_to": ["durable_append"],
    }]);
    assert_valid(&short);
    short["scorecard"][1]["verdict"] = "unreached".into();
    assert!(
        !validator().is_valid(&short),
        "an unknown verdict is caught"
    );

    let v = validator();
    let mut lost = report.clone();
    lost.as_object_mut().unwrap().remove("violation_count");
    assert!(!v.is_valid(&lost), "a missing key is caught");
    let mut causeless = report.clone();
    causeless["violations"][0]
        .as_object_mut()
        .unwrap()
        .remove("cause");
    assert!(
        !v.is_valid(&causeless),
        "a violation without its cause is caught"
    );
    let mut newer = report.clone();
    newer["format"] = 2.into();
    assert!(!v.is_valid(&newer), "another format is caught");
    let mut renamed = report;
    renamed["power_loss"]["states_per_s"] = 1.0.into();
    assert!(!v.is_valid(&renamed), "an unknown key is caught");
}
