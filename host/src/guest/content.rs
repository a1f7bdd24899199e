//! The content of a call's result besides its JSON text (WIT 0.4.0 `tool.content`), as the
//! host holds it, and the bounds a result's content must keep.

use super::wit::latest::{Content, wit_tool};

/// Content items one result may carry.
pub(crate) const MAX_ITEMS: usize = 64;
/// Bytes one result's content items may carry in all (text, data, URIs and names).
pub(crate) const MAX_BYTES: usize = 16 * 1024 * 1024;

/// One item of a result's content besides its JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentItem {
    /// Text for the model.
    Text(String),
    /// An image: its MIME type and bytes.
    Image {
        /// E.g. `image/png`.
        mime_type: String,
        /// The image's bytes.
        data: Vec<u8>,
    },
    /// A sound: its MIME type and bytes.
    Audio {
        /// E.g. `audio/wav`.
        mime_type: String,
        /// The sound's bytes.
        data: Vec<u8>,
    },
    /// A link to a resource.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// A short name.
        name: String,
        /// A title for people.
        title: Option<String>,
        /// What the resource is.
        description: Option<String>,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its size in bytes.
        size: Option<u64>,
    },
    /// A resource, contents included.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its contents.
        body: ResourceBody,
    },
}

/// The contents of an embedded resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceBody {
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl ContentItem {
    /// The bytes this item carries, for [`MAX_BYTES`].
    fn bytes(&self) -> usize {
        let optional = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        match self {
            ContentItem::Text(text) => text.len(),
            ContentItem::Image { mime_type, data } | ContentItem::Audio { mime_type, data } => {
                mime_type.len() + data.len()
            }
            ContentItem::ResourceLink {
                uri,
                name,
                title,
                description,
                mime_type,
                size: _,
            } => {
                uri.len()
                    + name.len()
                    + optional(title)
                    + optional(description)
                    + optional(mime_type)
            }
            ContentItem::Resource {
                uri,
                mime_type,
                body,
            } => {
                uri.len()
                    + optional(mime_type)
                    + match body {
                        ResourceBody::Text(text) => text.len(),
                        ResourceBody::Blob(data) => data.len(),
                    }
            }
        }
    }
}

/// A guest's content items as the host holds them, or a message for the model saying which
/// bound they break.
pub(crate) fn from_guest(items: Vec<Content>) -> Result<Vec<ContentItem>, String> {
    if items.len() > MAX_ITEMS {
        return Err(format!(
            "the tool's result has {} content items; at most {MAX_ITEMS} are allowed",
            items.len()
        ));
    }
    let items: Vec<ContentItem> = items.into_iter().map(Into::into).collect();
    let bytes: usize = items.iter().map(ContentItem::bytes).sum();
    if bytes > MAX_BYTES {
        return Err(format!(
            "the tool's result carries {bytes} bytes of content; at most {MAX_BYTES} are allowed"
        ));
    }
    Ok(items)
}

impl From<Content> for ContentItem {
    fn from(item: Content) -> Self {
        match item {
            Content::Text(text) => ContentItem::Text(text),
            Content::Image(media) => ContentItem::Image {
                mime_type: media.mime_type,
                data: media.data,
            },
            Content::Audio(media) => ContentItem::Audio {
                mime_type: media.mime_type,
                data: media.data,
            },
            Content::ResourceLink(link) => ContentItem::ResourceLink {
                uri: link.uri,
                name: link.name,
                title: link.title,
                description: link.description,
                mime_type: link.mime_type,
                size: link.size,
            },
            Content::Embedded(resource) => ContentItem::Resource {
                uri: resource.uri,
                mime_type: resource.mime_type,
                body: match resource.body {
                    wit_tool::ResourceBody::Text(text) => ResourceBody::Text(text),
                    wit_tool::ResourceBody::Blob(data) => ResourceBody::Blob(data),
                },
            },
        }
    }
}
