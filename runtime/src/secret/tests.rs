use super::*;

fn args(line: &[&str]) -> Vec<CommandArg> {
    line.iter().map(|a| CommandArg::from(*a)).collect()
}

#[test]
fn a_url_shows_its_host_and_path_but_no_credential() {
    assert_eq!(
        redact_url("http://user:hunter2@127.0.0.1:9/mcp?token=s3cret"),
        "http://user:***@127.0.0.1:9/mcp?token=***"
    );
    assert_eq!(
        redact_url("https://ghp_abc123@example.com/x?a=1&flag&b=2#frag"),
        "https://***@example.com/x?a=***&***&b=***#***"
    );
    assert_eq!(
        redact_url("postgres://lh:pw@db:5432/runs?sslmode=verify-full&password=pw2"),
        "postgres://lh:***@db:5432/runs?sslmode=verify-full&password=***"
    );
    // Only a PostgreSQL URL's settings are shown.
    assert_eq!(redact_url("http://h/?sslmode=x"), "http://h/?sslmode=***");
    // An `@` in the path is not user-info.
    assert_eq!(redact_url("http://host/a@b"), "http://host/a@b");
    assert_eq!(
        redact_url("http://127.0.0.1:9/mcp"),
        "http://127.0.0.1:9/mcp"
    );
    assert_eq!(redact_url("no url"), "(not a URL)");
}

#[test]
fn every_url_in_free_text_is_redacted() {
    let text = "error sending request for url (http://u:pw@h:1/mcp?token=s3cret): \
                connection refused; redirected to https://x.test/?code=abc, then 'ws://h/?k=v'";
    let shown = redact_urls_in(text);
    assert_eq!(
        shown,
        "error sending request for url (http://u:***@h:1/mcp?token=***): \
         connection refused; redirected to https://x.test/?code=***, then 'ws://h/?k=***'"
    );
    assert!(matches!(redact_urls_in("no address"), Cow::Borrowed(_)));
    assert_eq!(redact_urls_in("a :// b"), "a :// b");
}

#[test]
fn a_command_line_hides_marked_and_flag_named_values() {
    let mut command = args(&[
        "ops",
        "--region",
        "eu",
        "--token",
        "abcd1234",
        "--api-key=sk-999999",
        "DB_PASSWORD=pw12345",
        "--url",
        "https://h/x?sig=zzzz9999",
    ]);
    command.push(CommandArg::Secret("hunter22".into()));
    let shown = redact_command(&command);
    assert_eq!(
        shown,
        [
            "ops",
            "--region",
            "eu",
            "--token",
            "***",
            "--api-key=***",
            "DB_PASSWORD=***",
            "--url",
            "https://h/x?sig=***",
            "***"
        ]
    );
    let server = ToolServer {
        name: "ops".into(),
        command: Some(command),
        url: None,
        env: [("OPS_TOKEN".to_owned(), "envsecret".to_owned())].into(),
        idempotent: Default::default(),
    };
    let secrets = Secrets::of_server(&server);
    let said = "ops abcd1234 sk-999999 pw12345 zzzz9999 hunter22 envsecret eu";
    assert_eq!(secrets.scrub(said), "ops *** *** *** *** *** *** eu");
}

#[test]
fn a_shown_flow_hides_urls_commands_and_env_values() {
    let flow = serde_json::json!({
        "name": "f",
        "tools": [
            {"name": "ops", "command": ["ops", "--token", "abcd1234", {"secret": "hunter2"}],
             "env": {"OPS_TOKEN": "hunter3"}},
            {"name": "web", "url": "http://user:pw12@127.0.0.1:9/mcp?token=s3cret"}
        ]
    });
    let shown = redact_flow(flow);
    assert_eq!(shown["tools"][0]["env"]["OPS_TOKEN"], "(set)");
    assert_eq!(
        shown["tools"][0]["command"],
        serde_json::json!(["ops", "--token", "***", {"secret": "***"}])
    );
    assert_eq!(
        shown["tools"][1]["url"],
        "http://user:***@127.0.0.1:9/mcp?token=***"
    );
    let text = shown.to_string();
    for secret in ["abcd1234", "hunter2", "hunter3", "pw12", "s3cret"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

#[test]
fn percent_encoded_and_short_values() {
    let secrets = Secrets::of_url("http://u:p%40ss%21word@h/?t=a+b+c+d&v=1");
    let said = "p@ss!word p%40ss%21word a b c d exit status: 1";
    assert_eq!(secrets.scrub(said), "*** *** *** exit status: 1");
}

#[test]
fn the_log_scrubber_forgets_the_oldest_past_its_bound() {
    let mut first = Secrets::new();
    first.extend(["first-secret-0".to_owned()]);
    hide_in_logs(&first);
    assert_eq!(scrub_log("x first-secret-0"), "x ***");
    for i in 0..MAX_LOGGED_SECRETS {
        let mut more = Secrets::new();
        more.extend([format!("later-secret-{i}")]);
        hide_in_logs(&more);
    }
    assert_eq!(scrub_log("x first-secret-0"), "x first-secret-0");
    assert_eq!(
        scrub_log("at http://h/?k=later-secret-3"),
        "at http://h/?k=***"
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn no_text_panics_the_redaction(text in any::<String>()) {
            let _ = redact_url(&text);
            let _ = redact_urls_in(&text);
            let _ = Secrets::of_url(&text).scrub(&text);
            let command: Vec<CommandArg> =
                text.split(' ').map(CommandArg::from).collect();
            let _ = redact_command(&command);
        }

        #[test]
        fn a_urls_credentials_never_show(
            password in "[A-Za-z0-9%!$]{1,24}",
            token in "[A-Za-z0-9._~-]{1,24}",
            before in "[a-z ]{0,8}",
        ) {
            let url = format!("http://user:{password}@h:1/mcp?token={token}");
            let shown = redact_url(&url);
            prop_assert!(!shown.contains(&format!(":{password}@")), "{shown}");
            prop_assert!(!shown.contains(&format!("={token}")), "{shown}");
            let said = redact_urls_in(&format!("{before}({url}): failed")).into_owned();
            prop_assert!(said.contains("http://user:***@h:1/mcp?token=***"), "{said}");
        }
    }
}
