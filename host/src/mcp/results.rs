//! The MCP result of a tool call: what the host's answer to a call becomes for the client.

use super::resources;
use crate::{CallError, CallOutput, ToolHost};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};

/// The MCP result of a call in `scope`: the result with a `resource_link` to the full output
/// of each process whose text it cut (only the scope's, only logs that exist), a tool error as
/// an `isError` result (so is a call refused by the host's call limit), an unknown tool as
/// invalid params.
pub(super) fn call_result(
    host: &ToolHost,
    scope: &str,
    outcome: Result<CallOutput, CallError>,
) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(output) => {
            let mut result = tool_result(output.text);
            for id in &output.full_output {
                if let Some(path) = host.output_log(scope, id) {
                    result
                        .content
                        .push(ContentBlock::resource_link(resources::describe(id, &path)));
                }
            }
            Ok(result)
        }
        Err(CallError::UnknownTool { name, available }) => Err(ErrorData::invalid_params(
            format!("unknown tool `{name}`; available tools: {available}"),
            Some(serde_json::json!({ "tool": name })),
        )),
        Err(
            error @ (CallError::Tool(_)
            | CallError::Limit { .. }
            | CallError::Plugin { .. }
            | CallError::Busy { .. }
            | CallError::ScopeBusy { .. }
            | CallError::PrincipalBusy { .. }),
        ) => Ok(CallToolResult::error(vec![ContentBlock::text(
            error.to_string(),
        )])),
        // A permit of another scope: the server's own mistake, not the client's.
        Err(error @ CallError::ForeignPermit { .. }) => {
            Err(ErrorData::internal_error(error.to_string(), None))
        }
    }
}

/// A successful call's result: the JSON text as text content and, when it is a JSON object,
/// also as structured content.
fn tool_result(text: String) -> CallToolResult {
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value @ serde_json::Value::Object(_)) => {
            let mut result = CallToolResult::structured(value);
            result.content = vec![ContentBlock::text(text)];
            result
        }
        _ => CallToolResult::success(vec![ContentBlock::text(text)]),
    }
}
