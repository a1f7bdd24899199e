//! The MCP result of a tool call: what the host's answer to a call becomes for the client.

use super::resources;
use crate::{CallError, CallOutput, ContentItem, ResourceBody, ToolHost};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents};

/// The MCP result of a call in `scope`: the result's JSON text (left out when empty and the
/// tool gave content items), its content items in order, then a `resource_link` to the full
/// output of each process whose text it cut (only the scope's, only logs that exist); a tool
/// error as
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
            add_content(&mut result, output.content);
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
        // A tool that needs what the client did not declare (MCP `-32021`).
        Err(CallError::MissingCapability(names)) => {
            let required: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .map(|name| (name.clone(), serde_json::json!({})))
                .collect();
            Err(ErrorData::new(
                rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                CallError::MissingCapability(names).to_string(),
                Some(serde_json::json!({ "requiredCapabilities": required })),
            ))
        }
        // A retry whose replies or request state are unusable: the client's request is.
        Err(error @ CallError::Answers(_)) => {
            Err(ErrorData::invalid_params(error.to_string(), None))
        }
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

/// `items` after the result's text, which is left out when it is empty.
fn add_content(result: &mut CallToolResult, items: Vec<ContentItem>) {
    if items.is_empty() {
        return;
    }
    result
        .content
        .retain(|block| block.as_text().is_none_or(|t| !t.text.is_empty()));
    result.content.extend(items.into_iter().map(content_block));
}

/// A content item as MCP carries it: bytes as base64.
fn content_block(item: ContentItem) -> ContentBlock {
    match item {
        ContentItem::Text(text) => ContentBlock::text(text),
        ContentItem::Image { mime_type, data } => {
            ContentBlock::image(BASE64.encode(data), mime_type)
        }
        ContentItem::Audio { mime_type, data } => {
            ContentBlock::audio(BASE64.encode(data), mime_type)
        }
        ContentItem::ResourceLink {
            uri,
            name,
            title,
            description,
            mime_type,
            size,
        } => {
            let mut link = Resource::new(uri, name);
            link.title = title;
            link.description = description;
            link.mime_type = mime_type;
            link.size = size;
            ContentBlock::resource_link(link)
        }
        ContentItem::Resource {
            uri,
            mime_type,
            body,
        } => {
            let contents = match body {
                ResourceBody::Text(text) => ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    meta: None,
                },
                ResourceBody::Blob(data) => ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob: BASE64.encode(data),
                    meta: None,
                },
            };
            ContentBlock::resource(contents)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_items_follow_the_text_and_an_empty_text_is_left_out() {
        let items = vec![
            ContentItem::Text("hello".into()),
            ContentItem::Image {
                mime_type: "image/png".into(),
                data: vec![1, 2, 3],
            },
            ContentItem::Resource {
                uri: "test://r".into(),
                mime_type: Some("application/json".into()),
                body: ResourceBody::Blob(b"{}".to_vec()),
            },
        ];
        let mut result = tool_result(String::new());
        add_content(&mut result, items);
        let blocks: Vec<serde_json::Value> = result
            .content
            .into_iter()
            .map(|block| serde_json::to_value(block).unwrap())
            .collect();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0]["text"], "hello");
        assert_eq!(blocks[1]["type"], "image");
        assert_eq!(blocks[1]["data"], "AQID");
        assert_eq!(blocks[2]["type"], "resource");
        assert_eq!(blocks[2]["resource"]["blob"], "e30=");
        assert_eq!(blocks[2]["resource"]["mimeType"], "application/json");

        let mut plain = tool_result(String::new());
        add_content(&mut plain, Vec::new());
        assert_eq!(
            plain.content.len(),
            1,
            "without items the text stays, even empty"
        );
    }
}
