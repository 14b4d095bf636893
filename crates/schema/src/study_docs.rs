//! Every committed results document reads back as [`StudyResults`](crate::study::StudyResults) and
//! writes the same bytes.

#[cfg(test)]
mod tests {
    use crate::study::{EngineReport, StudyResults};

    const DOCS: [(&str, &str); 13] = [
        (
            "seed000-cluster",
            include_str!("../../../docs/results/seed000-cluster/results.json"),
        ),
        (
            "seed000-cluster-h3",
            include_str!("../../../docs/results/seed000-cluster-h3/results.json"),
        ),
        (
            "seed000-reuse",
            include_str!("../../../docs/results/seed000-reuse/results.json"),
        ),
        (
            "seed001-breakdown",
            include_str!("../../../docs/results/seed001-breakdown/results.json"),
        ),
        (
            "seed002-overload",
            include_str!("../../../docs/results/seed002-overload/results.json"),
        ),
        (
            "seed003-table2",
            include_str!("../../../docs/results/seed003-table2/results.json"),
        ),
        (
            "seed004-handshake",
            include_str!("../../../docs/results/seed004-handshake/results.json"),
        ),
        (
            "full/seed000-cluster",
            include_str!("../../../docs/results/full/seed000-cluster/results.json"),
        ),
        (
            "full/seed000-reuse",
            include_str!("../../../docs/results/full/seed000-reuse/results.json"),
        ),
        (
            "full/seed001-breakdown",
            include_str!("../../../docs/results/full/seed001-breakdown/results.json"),
        ),
        (
            "full/seed002-overload",
            include_str!("../../../docs/results/full/seed002-overload/results.json"),
        ),
        (
            "full/seed003-table2",
            include_str!("../../../docs/results/full/seed003-table2/results.json"),
        ),
        (
            "full/seed004-handshake",
            include_str!("../../../docs/results/full/seed004-handshake/results.json"),
        ),
    ];

    #[test]
    fn committed_results_documents_write_the_same_bytes() {
        for (name, doc) in DOCS {
            let r: StudyResults = serde_json::from_str(doc).unwrap();
            let again = serde_json::to_string_pretty(&r).unwrap();
            assert!(again == doc.trim_end(), "{name} changed");
            // Each section reads as its type.
            let engine = match &r.engine_report {
                None => "none",
                Some(EngineReport::Path(_)) => "path",
                Some(EngineReport::Probe(_)) => "probe",
                Some(EngineReport::Engine(_)) => "engine",
            };
            let want = match &name[name.find("seed").unwrap()..] {
                "seed003-table2" => "probe",
                "seed000-reuse" | "seed004-handshake" => "none",
                _ => "engine",
            };
            assert_eq!(engine, want, "{name}");
            for c in &r.cells {
                assert_eq!(
                    c.load.is_some(),
                    c.load_report().is_some(),
                    "{name} {}",
                    c.id
                );
            }
        }
    }

    #[test]
    fn a_path_engine_report_reads_as_path_cells_and_writes_sorted_keys() {
        let json = r#"{"path":{"c-r1":{"byte_check":{"bytes_down":9,"bytes_up":8,"connections":1,"diff_down_pct":0.5,"diff_up_pct":null,"handshake_bytes":5.0,"packets_down":3,"packets_up":2,"payload_down":7,"payload_up":6,"socket_in":4,"socket_out":3,"timestamps":true},"packet_path":{"down":{"x":1},"up":{"x":2}}},"c-r2":{"byte_check":null,"packet_path":{}}}}"#;
        let e: EngineReport = serde_json::from_str(json).unwrap();
        let EngineReport::Path(p) = &e else {
            panic!("{e:?}")
        };
        let check = p.path["c-r1"].byte_check.as_ref().unwrap();
        assert_eq!((check.connections, check.socket_in), (1, 4));
        assert!(check.diff_up_pct.is_infinite() && !check.within_1pct());
        assert!(p.path["c-r2"].byte_check.is_none());
        let again = crate::engine::sorted(&e, serde_json::value::Serializer).unwrap();
        assert_eq!(again.to_string(), json);
        // A document with other keys is another engine's.
        let other = r#"{"path":{},"rows":[]}"#;
        let e: EngineReport = serde_json::from_str(other).unwrap();
        assert!(matches!(e, EngineReport::Engine(_)), "{e:?}");
    }
}
