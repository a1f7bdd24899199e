//! Round trip of `process_input` through MCP stdio: a line typed into `cat` on a terminal,
//! returning as soon as `cat` has printed it back (`until` set to the echo and the line). Prints
//! the median (target: at most 5 ms) beside the same run's median of the smallest tool call
//! (`process_list`), so the ratio shows what the typing and the wait add; asserts nothing about
//! time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench process_input`.

use serde_json::json;
use std::time::{Duration, Instant};
use toolhost_e2e::mcp_client::{StdioClient, structured};
use toolhost_e2e::stats::{median, percentile, ratio};

const WARMUP: usize = 20;
const SAMPLES: usize = 300;

async fn input_once(client: &mut StdioClient, id: &str, n: usize) -> Duration {
    let line = format!("line {n}");
    let began = Instant::now();
    let result = client
        .call_tool(
            "process_input",
            json!({"process_id": id, "input": format!("{line}\n"), "until": format!("{line}\n{line}\n")}),
        )
        .await;
    let elapsed = began.elapsed();
    let output = structured(&result);
    assert_eq!(output["until_found"], true, "{output}");
    elapsed
}

async fn list_once(client: &mut StdioClient) -> Duration {
    let began = Instant::now();
    structured(&client.call_tool("process_list", json!({})).await);
    began.elapsed()
}

async fn run() {
    let mut client = StdioClient::start(&[]).await;
    let started = structured(
        &client
            .call_tool("execute", json!({"command": "cat", "tty": true}))
            .await,
    );
    let id = started["background_process_id"]
        .as_str()
        .expect("cat runs")
        .to_owned();
    for n in 0..WARMUP {
        input_once(&mut client, &id, n).await;
        list_once(&mut client).await;
    }
    let mut input = Vec::with_capacity(SAMPLES);
    let mut list = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES {
        input.push(input_once(&mut client, &id, WARMUP + n).await);
        list.push(list_once(&mut client).await);
    }
    let input_median = median(&mut input);
    let list_median = median(&mut list);
    println!("process_input: {SAMPLES} samples each, after {WARMUP} warm-up calls");
    println!(
        "  process_input round trip (a line to cat on a terminal, until its echo): median {:>9.3?}  p90 {:>9.3?}  (target <= 5ms)",
        input_median,
        percentile(&input, 0.9)
    );
    println!(
        "  process_list (the smallest tool call):                                   median {:>9.3?}  p90 {:>9.3?}",
        list_median,
        percentile(&list, 0.9)
    );
    println!(
        "  ratio process_input / process_list: {:.2}x",
        ratio(input_median, list_median)
    );
    client.close_stdin();
    client.wait_exit(Duration::from_secs(15)).await;
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}
