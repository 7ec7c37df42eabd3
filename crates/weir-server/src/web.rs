//! The web page at `/`: the files of `web/` in the repository, compiled into the binary (so
//! serving it needs nothing on disk and building weir needs no Node), served under `/ui/`. The
//! page is plain ES modules with no build step; it talks to the same REST API as every client.

use axum::Router;
use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

/// Every file of `web/` the page loads: name and contents.
const FILES: &[(&str, &str)] = &[
    ("index.html", include_str!("../../../web/index.html")),
    ("style.css", include_str!("../../../web/style.css")),
    ("app.js", include_str!("../../../web/app.js")),
    ("api.js", include_str!("../../../web/api.js")),
    ("dom.js", include_str!("../../../web/dom.js")),
    ("format.js", include_str!("../../../web/format.js")),
    ("actions.js", include_str!("../../../web/actions.js")),
    ("list.js", include_str!("../../../web/list.js")),
    ("pipeline.js", include_str!("../../../web/pipeline.js")),
    ("graph.js", include_str!("../../../web/graph.js")),
    ("checkpoints.js", include_str!("../../../web/checkpoints.js")),
    ("transactions.js", include_str!("../../../web/transactions.js")),
    ("timeline.js", include_str!("../../../web/timeline.js")),
    ("output.js", include_str!("../../../web/output.js")),
    ("editor.js", include_str!("../../../web/editor.js")),
    ("sql_highlight.js", include_str!("../../../web/sql_highlight.js")),
];

/// Only the page's own files and the API on this origin: nothing inline, nothing from
/// elsewhere (the page never fetches from the internet).
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// `/` and `/ui/{file}`.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/", get(|| async { file("index.html") })).route("/ui/{file}", get(asset))
}

async fn asset(Path(name): Path<String>) -> Response {
    file(&name)
}

fn file(name: &str) -> Response {
    let Some((_, contents)) = FILES.iter().find(|(file, _)| *file == name) else {
        return ApiError::not_found(format!("the page has no file '{name}'")).into_response();
    };
    let content_type = match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        _ => "text/javascript; charset=utf-8",
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // The files change with the binary: always ask, so an upgraded server's page loads.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        *contents,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_web_is_served_and_nothing_else() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("web/")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name != "README.md")
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = FILES.iter().map(|(name, _)| name.to_string()).collect();
        served.sort();
        assert_eq!(served, on_disk, "web/ and the files compiled into the binary differ");
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        for (name, contents) in FILES {
            for line in contents.lines().filter(|l| l.starts_with("import ")) {
                let Some(path) = line.split('\'').nth(1) else { continue };
                let imported = path.trim_start_matches("./");
                assert!(FILES.iter().any(|(file, _)| *file == imported), "{name} imports {path}, not served");
            }
        }
    }
}
