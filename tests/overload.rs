//! Smoke version of `bench/overload.sh`: user sessions (`run_users`)
//! against an embedded one-thread server, below capacity and far above
//! it, with admission control off and session-aware. Bounded: each run is
//! 2 s of arrivals plus at most a 2 s drain.
//!
//! Asserted: below capacity every user completes its session and goodput
//! equals throughput; far above it the session-aware server sheds new full
//! handshakes and never a resumption, and holds at least as many completed
//! sessions as the unprotected one (the benchmark measures by how much).

use std::time::Duration;

use tlslab_crypto::pki::{self, KeyType};
use tlslab_load::{LoadConfig, Target, ThinkTime, Trust, Users, UsersReport};
use tlslab_server::{
    AdmissionMode, AdmissionSettings, AdmissionStats, CertSource, Content, ServeConfig, Server,
    TlsSettings,
};

fn server(g: &pki::Generated, mode: AdmissionMode) -> Server {
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tls.tickets = true;
    tls.alpn = vec![b"http/1.1".to_vec()];
    let mut c = ServeConfig::new(([127, 0, 0, 1], 0).into(), Content::Empty, tls);
    c.threads = 1;
    c.admission = AdmissionSettings {
        mode,
        ..AdmissionSettings::default()
    };
    Server::start(c).unwrap()
}

fn run(g: &pki::Generated, mode: AdmissionMode, rate: f64) -> (UsersReport, AdmissionStats) {
    let s = server(g, mode);
    let port = s.https_addr().unwrap().port();
    let mut cfg = LoadConfig::new(vec![
        Target::parse(&format!("https://127.0.0.1:{port}/bytes/100")).unwrap(),
    ]);
    cfg.sni = Some("localhost".into());
    cfg.trust = Trust::Roots(g.roots().unwrap());
    cfg.duration = Some(Duration::from_secs(2));
    cfg.timeout = Duration::from_millis(500);
    cfg.retry_on_failure = true;
    cfg.reuse = 0.8;
    cfg.think_time = ThinkTime::Const(Duration::from_millis(10));
    cfg.threads = 1;
    let users = Users {
        rate,
        requests: 3,
        max_users: 5_000,
        drain: Duration::from_secs(2),
        then: None,
    };
    let r = tlslab_load::run_users(&cfg, users).unwrap();
    let a = s.shutdown().admission.unwrap_or_default();
    (r, a)
}

#[test]
fn user_sessions_complete_below_capacity_and_only_full_handshakes_are_shed_above_it() {
    let g = pki::generate(KeyType::Rsa3072, &[]).unwrap();
    let (light, _) = run(&g, AdmissionMode::Off, 5.0);
    eprintln!("light: {light:?}");
    assert!(light.users_arrived > 0);
    assert_eq!(light.sessions_completed, light.users_arrived, "{light:?}");
    assert_eq!(light.responses, 3 * light.sessions_completed, "{light:?}");
    assert!((light.goodput_rps - light.throughput_rps).abs() < 1e-9);
    assert!(
        light.handshakes_resumed > 0,
        "80 % reuse resumes: {light:?}"
    );

    // Far beyond what one thread signing with RSA-3072 can serve.
    let (off, _) = run(&g, AdmissionMode::Off, 2_000.0);
    let (session, adm) = run(&g, AdmissionMode::Session, 2_000.0);
    eprintln!("off: {off:?}\nsession: {session:?}\nadmission: {adm:?}");
    assert!(off.failures.values().sum::<u64>() > 0, "{off:?}");
    assert!(adm.full_shed > 0, "{adm:?}");
    assert_eq!(adm.resume_shed, 0, "{adm:?}");
    assert!(adm.resume_admitted > 0, "{adm:?}");
    assert!(
        session.sessions_completed >= off.sessions_completed,
        "session admission completed fewer sessions: {} < {}",
        session.sessions_completed,
        off.sessions_completed
    );
}
