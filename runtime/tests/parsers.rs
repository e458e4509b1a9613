//! No input reaches a panic in the parsers that read what others wrote —
//! flows (TOML and JSON), the configuration file, a model's event stream,
//! the evaluator's strict-JSON verdicts and budget decisions — and the
//! event-stream decoder keeps no more text than it was fed. The same
//! properties as the `cargo fuzz` targets of `fuzz/`, driven by proptest so
//! that `cargo test` always checks them.

// The model's event stream is read by the model client's parser, which
// comes with the `openai` feature; the other parsers are in every build.
#[cfg(feature = "openai")]
use leasehold::model::StreamParser;
use leasehold::{config::Config, flow_file, parse_budget_decision, parse_verdict};
use proptest::prelude::*;

/// Text that is mostly the syntax the parsers look for, so that cases get
/// past the first character, mixed with anything at all.
fn texty() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("\"".to_owned()),
        Just("=".to_owned()),
        Just(":".to_owned()),
        Just(",".to_owned()),
        Just("\n".to_owned()),
        Just("name = \"n\"\ntask = \"t\"\nmax_steps = 3\n".to_owned()),
        Just("[leases]\ntool_call = ".to_owned()),
        Just("[lease]\ntool_call = ".to_owned()),
        Just("[[tools]]\nname = \"x\"\ncommand = [\"a\"]\n".to_owned()),
        Just("\"verdict\":\"RENEW\",\"reason\":\"r\",\"nudge\":\"\"".to_owned()),
        Just("\"decision\":\"EXTEND\",\"reason\":\"r\",\"confidence\":".to_owned()),
        Just("data: ".to_owned()),
        Just("[DONE]".to_owned()),
        Just("\"999999999999999999999days\"".to_owned()),
        Just("1e308".to_owned()),
        "[0-9]{1,25}(ns|ms|s|m|h|d|days|years)?",
        any::<String>(),
    ];
    proptest::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn flow_parsers_never_panic(text in texty()) {
        if let Ok(flow) = flow_file::parse_toml(&text) {
            prop_assert!(flow.validate().is_ok());
        }
        if let Ok(flow) = flow_file::parse_json(&text) {
            prop_assert!(flow.validate().is_ok());
        }
    }

    #[test]
    fn the_configuration_parser_never_panics(text in texty()) {
        if let Ok(config) = Config::from_toml_str(&text) {
            prop_assert!(config.validate().is_ok());
            for (_, value, _) in config.entries() {
                prop_assert!(!value.is_empty());
            }
        }
    }

    #[test]
    fn strict_json_parsers_never_panic(text in texty()) {
        if let Ok(parsed) = parse_verdict(&text) {
            prop_assert!(!parsed.reason.trim().is_empty());
        }
        if let Ok(parsed) = parse_budget_decision(&text) {
            prop_assert!((0.0..=1.0).contains(&parsed.confidence));
        }
    }

    #[cfg(feature = "openai")]
    #[test]
    fn the_event_stream_decoder_never_panics_and_keeps_no_more_than_it_was_fed(
        body in prop_oneof![
            texty().prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..2048),
        ],
        step in 1..64usize,
    ) {
        let mut parser = StreamParser::new();
        let mut fed = 0usize;
        for chunk in body.chunks(step) {
            fed += chunk.len();
            let Ok(got) = parser.feed(chunk) else { return Ok(()) };
            prop_assert!(got.text.len() <= chunk.len() + fed);
            prop_assert!(parser.content().len() <= fed);
        }
        if let Ok(reply) = parser.finish() {
            prop_assert!(reply.content.len() <= fed);
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    // A nesting a hostile client can send in a few hundred kilobytes.
    for depth in [1_000, 100_000] {
        let json = format!(
            "{{\"name\":\"n\",\"task\":\"t\",\"max_steps\":0,\"tools\":{}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(flow_file::parse_json(&json).is_err());
        let toml = format!("name = {}{}\n", "[".repeat(depth), "]".repeat(depth));
        assert!(flow_file::parse_toml(&toml).is_err());
        assert!(Config::from_toml_str(&toml).is_err());
        let verdict = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(parse_verdict(&verdict).is_err());
        assert!(parse_budget_decision(&verdict).is_err());
        #[cfg(feature = "openai")]
        {
            let mut parser = StreamParser::new();
            let sse = format!("data: {}{}\n\n", "[".repeat(depth), "]".repeat(depth));
            let fed = parser.feed(sse.as_bytes());
            assert!(fed.is_err() || parser.finish().is_err());
        }
    }
}

#[test]
fn prices_are_read_per_model_and_a_figure_that_is_not_a_price_is_refused_naming_it() {
    let config = Config::from_toml_str(
        "[prices.\"gpt-4o\"]\ninput = 2.5\noutput = 10\n[prices.free]\ninput = 0\noutput = 0\n",
    )
    .expect("prices");
    let price = config.prices.get("gpt-4o").expect("priced");
    assert_eq!((price.input, price.output), (2.5, 10.0));
    assert!(config.prices.get("free").is_some());
    assert!(config.prices.get("another").is_none());
    // The engine prices its calls with them.
    assert_eq!(config.engine_config().prices, config.prices);

    for (text, named) in [
        ("[prices.m]\ninput = -1\noutput = 1\n", "prices.\"m\".input"),
        (
            "[prices.m]\ninput = 1\noutput = 1e300\n",
            "prices.\"m\".output",
        ),
        (
            "[prices.m]\ninput = nan\noutput = 1\n",
            "prices.\"m\".input",
        ),
        (
            "[prices.m]\ninput = \"1\"\noutput = 1\n",
            "prices.\"m\".input",
        ),
        ("[prices.m]\ninput = 1\n", "missing `output`"),
        (
            "[prices.m]\ninput = 1\noutput = 1\ncurrency = \"EUR\"\n",
            "prices.\"m\".currency",
        ),
        ("[prices]\nm = 3\n", "prices.\"m\""),
        ("prices = 3\n", "prices"),
    ] {
        let refused = Config::from_toml_str(text).expect_err(text).to_string();
        assert!(refused.contains(named), "{text}: {refused}");
    }
}
