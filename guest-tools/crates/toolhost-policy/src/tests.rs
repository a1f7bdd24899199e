//! The crate's own tests: the extension points, with what runs without a host (definitions,
//! refusals and tools that start no process).
//! The standard tools are tested end to end through the bundled policies, inside the real
//! host (tests/in_process/policies_fake.rs, tests/in_process/tools_real.rs).

use super::*;
use serde_json::{Value, json};
use std::time::Duration;
use toolhost::plugin::process::{Leftover, LogPage};
use toolhost::plugin::sandbox::Limits;

fn sandbox() -> SandboxSettings {
    SandboxSettings {
        mode: Mode::WorkspaceWrite,
        network: Network::Full,
        allowed_hosts: Vec::new(),
        writable: Vec::new(),
        limits: Limits {
            memory_bytes: None,
            processes: None,
            cpu_seconds: None,
        },
        summary: "confined to the workspace".into(),
    }
}

fn cx(config: &str) -> CallContext {
    CallContext {
        scope: "test".into(),
        config: config.into(),
        asking: crate::Asking {
            can: crate::CanAsk::empty(),
            unavailable: Some("nobody is here".into()),
            secret_unavailable: Some("nobody is here".into()),
        },
        answers: None,
    }
}

/// The result of a call that asked nothing.
fn done(outcome: crate::CallOutcome) -> crate::CallResult {
    match outcome {
        crate::CallOutcome::Done(result) => result,
        crate::CallOutcome::NeedsInput(_) => panic!("the call asked"),
    }
}

fn echo(call: &ToolCall) -> Result<Reply, String> {
    let args = call.args(&["text"])?;
    let text = args.required_string("text")?;
    Ok(Reply::new(json!({
        "tool": call.name,
        "policy": call.policy.name,
        "scope": call.context.scope,
        "echo": text,
        "max_timeout": format_duration(call.settings.max_timeout),
    }))
    .with_full_output("p1"))
}

const ECHO: Tool = Tool {
    name: "echo",
    title: "Echo",
    description: "Echo text ({policy} policy, {sandbox}, up to {max_timeout}, {unknown}).",
    input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}}}"#,
    output_schema: Some(r#"{"type":"object"}"#),
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    run: echo,
};

fn quiet_list(_call: &ToolCall) -> Result<Reply, String> {
    Ok(json!({"processes": []}).into())
}

/// Replaces the standard `process_list`.
const QUIET_LIST: Tool = Tool {
    name: "process_list",
    title: "List nothing",
    description: "Lists nothing.",
    input_schema: "{}",
    output_schema: None,
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    run: quiet_list,
};

fn names(list: &[ToolDefinition]) -> Vec<&str> {
    list.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn a_new_policy_has_the_standard_tools_and_wording() {
    let policy = Policy::new("plain");
    let list = tools(&policy, "{}", &sandbox()).unwrap();
    assert_eq!(names(&list), STANDARD_TOOLS);
    assert_eq!(policy.settings, Settings::DEFAULT);
    assert_eq!(policy.texts, Texts::STANDARD);
    assert!(policy.deny.is_empty() && policy.tools.is_empty());
    assert!(policy.confinement.request().is_none());
    let unknown = call(&policy, "nope", "{}", &cx("")).err().unwrap();
    assert_eq!(
        unknown,
        "unknown tool `nope`; this plugin provides execute, process_output, process_input, \
         process_list, process_signal"
    );
}

#[test]
fn tools_of_its_own_are_listed_and_called() {
    const POLICY: Policy = Policy {
        tools: &[ECHO, QUIET_LIST],
        ..Policy::new("mine")
    };
    let list = tools(&POLICY, r#"{"max_timeout": "2m"}"#, &sandbox()).unwrap();
    assert_eq!(
        names(&list),
        [
            "execute",
            "process_output",
            "process_input",
            "process_signal",
            "echo",
            "process_list"
        ]
    );
    let echo = &list[4];
    assert_eq!(
        echo.description,
        "Echo text (mine policy, confined to the workspace, up to 2m, {unknown})."
    );
    assert_eq!(echo.title.as_deref(), Some("Echo"));
    assert_eq!(echo.annotations.read_only, Some(true));
    assert_eq!(echo.output_schema.as_deref(), Some(r#"{"type":"object"}"#));

    let result = done(
        call(
            &POLICY,
            "echo",
            r#"{"text": "hi"}"#,
            &cx(r#"{"max_timeout": "2m"}"#),
        )
        .unwrap(),
    );
    let output: Value = serde_json::from_str(&result.output).unwrap();
    assert_eq!(
        output,
        json!({"tool": "echo", "policy": "mine", "scope": "test", "echo": "hi", "max_timeout": "2m"})
    );
    assert_eq!(result.full_output, ["p1"]);
    let bad = call(&POLICY, "echo", r#"{"txt": "hi"}"#, &cx("")).err();
    assert_eq!(
        bad.as_deref(),
        Some("unknown argument `txt`; accepted: `text`")
    );

    // The replacement answers for the standard tool.
    let listed = done(call(&POLICY, "process_list", "", &cx("")).unwrap());
    assert_eq!(listed.output, r#"{"processes":[]}"#);
    let unknown = call(&POLICY, "nope", "{}", &cx("")).err().unwrap();
    assert!(
        unknown.ends_with(
            "execute, process_output, process_input, process_signal, echo, process_list"
        ),
        "{unknown}"
    );
}

#[test]
fn unusable_tools_refuse_the_load() {
    let refused = |tools: &'static [Tool]| {
        let policy = Policy {
            tools,
            ..Policy::new("mine")
        };
        super::tools(&policy, "{}", &sandbox()).err().unwrap()
    };
    assert_eq!(
        refused(&[ECHO, ECHO]),
        "the mine policy has two tools named `echo`"
    );
    const NOT_JSON: Tool = Tool {
        input_schema: "{type: object}",
        ..ECHO
    };
    assert!(
        refused(&[NOT_JSON]).starts_with("tool `echo`: input_schema is not valid JSON"),
        "{}",
        refused(&[NOT_JSON])
    );
    const BAD_NAME: Tool = Tool {
        name: "echo it",
        ..ECHO
    };
    assert_eq!(
        refused(&[BAD_NAME]),
        "tool name `echo it` must be letters, digits, `_` and `-`"
    );
}

fn git_push(c: &Command) -> bool {
    c.invocations("git")
        .any(|args| args.iter().any(|a| a == "push"))
}

const NO_PUSH: DenyRule = DenyRule {
    name: "git-push",
    reason: "pushing is for the user",
    matches: git_push,
};

#[test]
fn deny_rules_refuse_before_anything_runs_in_the_policy_s_words() {
    const STANDARD: Policy = Policy {
        deny: &[NO_PUSH, deny::FORK_BOMB],
        ..Policy::new("mine")
    };
    let execute = |policy: &Policy, command: &str| {
        let args = json!({ "command": command }).to_string();
        call(policy, "execute", &args, &cx("")).err().unwrap()
    };
    assert_eq!(
        execute(&STANDARD, "cd repo && sudo git -C . push --force"),
        "refused by the mine policy, rule `git-push`: pushing is for the user. Nothing was run. \
         The person could not be asked to allow it: nobody is here."
    );
    assert_eq!(
        execute(&STANDARD, ":(){ :|:& };:"),
        "refused by the mine policy, rule `fork-bomb`: a fork bomb exhausts the machine's \
         processes. Nothing was run. The person could not be asked to allow it: nobody is here."
    );
    let described = &tools(&STANDARD, "", &sandbox()).unwrap()[0].description;
    assert!(
        described.ends_with(
            " This policy refuses some commands: pushing is for the user; a fork bomb \
             exhausts the machine's processes."
        ),
        "{described}"
    );

    const WORDED: Policy = Policy {
        texts: Texts {
            refusal: "{policy} won't run that ({rule}: {reason})",
            deny_summary: "Never {reasons}.",
            execute_extra: "Ask the user to push for you ({policy}).",
            nobody_to_ask: "; nobody was asked ({why})",
            ..Texts::STANDARD
        },
        ..STANDARD
    };
    assert_eq!(
        execute(&WORDED, "git push"),
        "mine won't run that (git-push: pushing is for the user); nobody was asked (nobody is here)"
    );
    let described = &tools(&WORDED, "", &sandbox()).unwrap()[0].description;
    assert!(
        described.ends_with(
            " Never pushing is for the user; a fork bomb exhausts the machine's processes. \
             Ask the user to push for you (mine)."
        ),
        "{described}"
    );
}

#[test]
fn settings_come_from_the_policy_and_the_manifest_config() {
    const KILLING: Policy = Policy {
        settings: Settings {
            default_timeout: Duration::from_secs(30),
            on_timeout: OnTimeout::Kill,
            ..Settings::DEFAULT
        },
        ..Policy::new("mine")
    };
    let described = |config: &str| {
        tools(&KILLING, config, &sandbox()).unwrap()[0]
            .description
            .clone()
    };
    let own = described("");
    assert!(
        own.contains("time out after 30s by default (at most 30m)"),
        "{own}"
    );
    assert!(
        own.contains("it and everything it started are killed"),
        "{own}"
    );
    let configured = described(r#"{"default_timeout": "5s", "on_timeout": "handover"}"#);
    assert!(
        configured.contains("time out after 5s by default"),
        "{configured}"
    );
    assert!(configured.contains("it is NOT killed"), "{configured}");
    let typo = tools(&KILLING, r#"{"default_timout": "5s"}"#, &sandbox())
        .err()
        .unwrap();
    assert!(
        typo.starts_with("unknown plugin config key `default_timout`"),
        "{typo}"
    );
}

#[test]
fn notes_match_the_command() {
    fn installs(c: &Command) -> bool {
        c.invocations("npm").next().is_some()
    }
    const NOTES: &[CommandNote] = &[
        FILE_DUMP_NOTE,
        CommandNote {
            text: "Prefer npm ci.",
            matches: installs,
        },
    ];
    assert_eq!(
        notes::for_command(NOTES, "sudo npm install"),
        ["Prefer npm ci."]
    );
    assert_eq!(
        notes::for_command(NOTES, "cat package.json && npm i"),
        [FILE_DUMP_NOTE.text, "Prefer npm ci."]
    );
    assert!(notes::for_command(&[], "cat x").is_empty());
}

#[test]
fn confinement_requests_only_what_is_asked() {
    let asked = Confinement {
        mode: Some(Mode::ReadOnly),
        network: None,
    };
    let request = asked.request().unwrap();
    assert_eq!(
        (request.mode, request.network),
        (Some(Mode::ReadOnly), None)
    );
    assert_eq!(asked.applied(&sandbox()), (Mode::ReadOnly, Network::Full));
}

#[test]
fn process_output_describes_paging_and_refuses_bad_pages_before_any_host_call() {
    let policy = Policy::new("plain");
    let list = tools(&policy, "{}", &sandbox()).unwrap();
    let output = list.iter().find(|t| t.name == "process_output").unwrap();
    let schema: Value = serde_json::from_str(&output.input_schema).unwrap();
    assert_eq!(schema["properties"]["offset"]["type"], "integer");
    assert_eq!(schema["properties"]["length"]["minimum"], 1);
    assert!(output.description.contains("offset and length page"));
    let results: Value = serde_json::from_str(output.output_schema.as_deref().unwrap()).unwrap();
    for field in ["offset", "next_offset", "total_bytes", "left_running"] {
        assert!(results["properties"].get(field).is_some(), "{field}");
    }

    let refused = |args: Value| {
        call(&policy, "process_output", &args.to_string(), &cx(""))
            .err()
            .unwrap()
    };
    let id = "p1";
    for (args, expected) in [
        (
            json!({"process_id": id, "offset": "10"}),
            "`offset` must be a whole number of bytes (negative counts from the end of the \
             output), got string \"10\"",
        ),
        (
            json!({"process_id": id, "offset": 1.5}),
            "`offset` must be a whole number of bytes (negative counts from the end of the \
             output), got number 1.5",
        ),
        (
            json!({"process_id": id, "length": 0}),
            "`length` must be a whole number of bytes, at least 1, got number 0",
        ),
        (
            json!({"process_id": id, "offset": 0, "length": -5}),
            "`length` must be a whole number of bytes, at least 1, got number -5",
        ),
        (
            json!({"process_id": id, "length": "all"}),
            "`length` must be a whole number of bytes, at least 1, got string \"all\"",
        ),
    ] {
        assert_eq!(refused(args.clone()), expected, "{args}");
    }
    assert!(
        refused(json!({"process_id": id, "offset": 0, "view": "screen"}))
            .contains("do not go with view \"screen\"")
    );
    assert!(
        refused(json!({"process_id": id, "length": 100, "only_new": true}))
            .starts_with("`only_new` does not go with `offset` and `length`")
    );
}

#[test]
fn a_page_defaults_to_the_output_cap_from_the_start_and_is_bounded_by_it() {
    let settings = Settings::DEFAULT;
    let cap = settings.output_cap_bytes as u64;
    let request = |args: Value| {
        let args = Args::parse(&args.to_string(), &["offset", "length"]).unwrap();
        process_tools::page_request(&args, &settings).unwrap()
    };
    assert_eq!(request(json!({})), None);
    assert_eq!(
        request(json!({"offset": -500})),
        Some(render::PageRequest {
            offset: -500,
            length: cap,
            clamped_from: None
        })
    );
    assert_eq!(
        request(json!({"length": 100})),
        Some(render::PageRequest {
            offset: 0,
            length: 100,
            clamped_from: None
        })
    );
    assert_eq!(
        request(json!({"offset": 10, "length": 1_000_000})),
        Some(render::PageRequest {
            offset: 10,
            length: cap,
            clamped_from: Some(1_000_000)
        })
    );
}

fn page(text: &str, offset: u64, total: u64, running: bool, capped: bool) -> LogPage {
    LogPage {
        text: text.into(),
        offset,
        next_offset: offset + text.len() as u64,
        total_bytes: total,
        capped,
        running,
    }
}

fn asked(offset: i64, length: u64) -> render::PageRequest {
    render::PageRequest {
        offset,
        length,
        clamped_from: None,
    }
}

#[test]
fn a_page_says_which_bytes_it_holds_and_where_the_next_starts() {
    // From the start, more to come.
    let note = render::page_note(&page("0123", 0, 10, false, false), &asked(0, 4));
    assert_eq!(
        note,
        "This page is bytes 0 to 4 of the output, 10 bytes in all. The next page starts at \
         offset 4 (process_output with offset 4)."
    );
    // From the end: the last page.
    let note = render::page_note(&page("89", 8, 10, false, false), &asked(-2, 100));
    assert_eq!(
        note,
        "This page is bytes 8 to 10 of the output, 10 bytes in all. That is the end of the \
         output."
    );
    // Past the end.
    let note = render::page_note(&page("", 10, 10, false, false), &asked(50, 100));
    assert_eq!(
        note,
        "The output has 10 bytes in all: offset 50 is at or past its end. That is the end of \
         the output."
    );
    // Still running, capped, and a length lowered to the cap.
    let request = render::PageRequest {
        offset: 0,
        length: 32768,
        clamped_from: Some(100_000),
    };
    let note = render::page_note(&page("0123456789", 0, 10, true, true), &request);
    assert!(
        note.starts_with(
            "length 100000 is above this policy's output cap: a page holds at most 32768 bytes."
        ),
        "{note}"
    );
    assert!(
        note.contains("the process still runs, so more may come from offset 10"),
        "{note}"
    );
    assert!(
        note.contains("The log stops at 10 bytes (the host's cap)"),
        "{note}"
    );
    let empty = render::page_note(&page("", 0, 0, true, false), &asked(0, 10));
    assert!(
        empty.starts_with("The output log is empty so far."),
        "{empty}"
    );
}

fn leftovers(n: i32) -> Vec<Leftover> {
    (1..=n)
        .map(|pid| Leftover {
            pid: 100 + pid,
            command: format!("server --port {pid}"),
        })
        .collect()
}

#[test]
fn leftovers_are_counted_named_and_pointed_to_process_signal() {
    assert_eq!(render::leftovers_note("p1", &[]), None);
    let one = render::leftovers_note("p1", &leftovers(1)).unwrap();
    assert_eq!(
        one,
        "Process p1 has exited, but 1 process it started still runs (pid 101 `server --port \
         1`). It still writes to the output of process p1: read it with process_output, and \
         stop it with process_signal (process_id \"p1\")."
    );
    let many = leftovers(12);
    let note = render::leftovers_note("p1", &many).unwrap();
    assert!(note.contains("12 processes it started"), "{note}");
    assert!(
        note.contains("pid 110 `server --port 10`, and 2 more"),
        "{note}"
    );
    assert!(!note.contains("pid 111"), "{note}");
    let listed = render::leftovers_json(&many);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(render::LEFTOVERS_LISTED)
    );
    assert_eq!(listed[0], json!({"pid": 101, "command": "server --port 1"}));
}

#[test]
fn signalling_what_an_exited_process_left_says_how_many_it_stopped() {
    use toolhost::plugin::process::Signal;
    let before = leftovers(2);
    assert_eq!(
        process_tools::left_running_message(Signal::Terminate, &before, &[]),
        "The process had already exited; stopped 2 processes it left running (pid 101 \
         `server --port 1`, pid 102 `server --port 2`)."
    );
    let message = process_tools::left_running_message(Signal::Terminate, &before, &before[1..]);
    assert!(
        message.contains("SIGTERM sent to the 2 processes it left running"),
        "{message}"
    );
    assert!(
        message.contains("Stopped 1 of them; 1 process still runs (pid 102"),
        "{message}"
    );
    assert!(
        message.ends_with("it gets SIGKILL after the grace period."),
        "{message}"
    );
}

#[test]
fn the_execute_description_names_an_allow_list_and_says_none_otherwise() {
    let description = |policy: &Policy, network: Network, hosts: &[&str]| {
        let sandbox = SandboxSettings {
            network,
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..sandbox()
        };
        let list = tools(policy, "{}", &sandbox).unwrap();
        list.into_iter()
            .find(|tool| tool.name == "execute")
            .unwrap()
            .description
    };
    let hosts = ["pypi.org", "*.github.com"];
    let plain = Policy::new("plain");
    let text = description(&plain, Network::Allow, &hosts);
    assert!(
        text.contains("reaches only pypi.org, *.github.com, through the proxy"),
        "{text}"
    );
    assert!(!text.contains("no network"), "{text}");
    assert!(description(&plain, Network::None, &[]).contains("no network"));
    // A policy that asks for none itself gets none, whatever the grant allows.
    let strict = Policy {
        confinement: Confinement {
            mode: None,
            network: Some(Network::None),
        },
        ..Policy::new("strict")
    };
    assert!(description(&strict, Network::Allow, &hosts).contains("no network"));
}
