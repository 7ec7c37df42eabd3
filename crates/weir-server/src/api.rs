//! The REST API under `/api/v1` (described by `/api/v1/openapi.json`), `/metrics` and
//! `/healthz`. Bodies are parsed here rather than by axum's extractors, so that every
//! malformed request gets the same JSON error shape ([`ErrorBody`]) and a 4xx.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use datafusion::arrow::json::WriterBuilder;
use datafusion::arrow::json::writer::LineDelimited;
use serde::Deserialize;
use utoipa::OpenApi;

use crate::cluster::{Cluster, WorkerView};
use crate::dataflow::{Dataflow, DataflowEdge, DataflowNode, NodeRole};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::manager::{Manager, PipelineSummary, PipelineView, StatementResult, TableView};
use crate::metrics::prometheus_text;
use crate::store::{PipelineRecord, Transition};

#[derive(Clone)]
pub struct AppState {
    pub manager: Arc<Manager>,
    pub token: Option<String>,
    pub cluster: Arc<Cluster>,
}

/// `POST /api/v1/statements`: one or more SQL statements.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StatementsRequest {
    pub sql: String,
}

/// `POST /api/v1/pipelines/{id}/resume`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// Run at this parallelism instead (state is re-split by key).
    #[schema(minimum = 1, maximum = 256)]
    pub parallelism: Option<usize>,
    /// Resume from this kept checkpoint rather than the latest.
    pub checkpoint: Option<u64>,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "weir", description = "Streaming SQL over Kafka, exactly once."),
    paths(
        statements,
        list_pipelines,
        get_pipeline,
        stop_pipeline,
        stop_pipeline_now,
        resume_pipeline,
        delete_pipeline,
        checkpoints,
        checkpoint,
        output,
        tables,
        connectors,
        workers
    ),
    components(schemas(
        StatementsRequest,
        ResumeRequest,
        StatementResult,
        PipelineRecord,
        PipelineSummary,
        PipelineView,
        Dataflow,
        DataflowNode,
        DataflowEdge,
        NodeRole,
        Transition,
        TableView,
        ConnectorsView,
        ConnectorView,
        WorkerView,
        ErrorBody
    ))
)]
struct ApiDoc;

/// The service's routes.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let api = Router::new()
        .route("/statements", post(statements))
        .route("/pipelines", get(list_pipelines))
        .route("/pipelines/{id}", get(get_pipeline).delete(delete_pipeline))
        .route("/pipelines/{id}/stop", post(stop_pipeline))
        .route("/pipelines/{id}/stop-now", post(stop_pipeline_now))
        .route("/pipelines/{id}/resume", post(resume_pipeline))
        .route("/pipelines/{id}/checkpoints", get(checkpoints))
        .route("/pipelines/{id}/checkpoints/{checkpoint}", get(checkpoint))
        .route("/pipelines/{id}/output", get(output))
        .route("/tables", get(tables))
        .route("/connectors", get(connectors))
        .route("/workers", get(workers))
        .route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    let metrics = Router::new()
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .nest_service("/api/v1/cluster", crate::cluster::routes(state.cluster.clone()))
        .nest("/api/v1", api)
        .merge(metrics)
        .route("/healthz", get(|| async { "ok" }))
        .merge(crate::web::routes())
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// With a token configured, every API route needs it.
async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !crate::bearer::matches(given, token) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

pub(crate) fn body<T: for<'de> Deserialize<'de>>(bytes: Result<Bytes, BytesRejection>) -> ApiResult<T> {
    let bytes = bytes.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                body: ErrorBody { code: "payload_too_large", message: rejection.body_text(), line: None, column: None },
            }
        } else {
            ApiError::bad_request(rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("the body is not the expected JSON: {e}")))
}

fn pipeline_id(id: &str) -> ApiResult<i64> {
    id.parse().map_err(|_| ApiError::not_found(format!("'{id}' is not a pipeline id")))
}

#[utoipa::path(get, path = "/api/v1/workers", responses((status = 200, body = [WorkerView])))]
async fn workers(State(state): State<AppState>) -> Json<Vec<WorkerView>> {
    Json(state.cluster.workers())
}

#[utoipa::path(post, path = "/api/v1/statements", request_body = StatementsRequest,
    responses((status = 200, body = [StatementResult]), (status = 400, body = ErrorBody)))]
async fn statements(
    State(state): State<AppState>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Vec<StatementResult>>> {
    let request: StatementsRequest = body(bytes)?;
    Ok(Json(state.manager.statements(&request.sql).await?))
}

#[utoipa::path(get, path = "/api/v1/pipelines", responses((status = 200, body = [PipelineSummary])))]
async fn list_pipelines(State(state): State<AppState>) -> ApiResult<Json<Vec<PipelineSummary>>> {
    Ok(Json(state.manager.summaries().await?))
}

#[utoipa::path(get, path = "/api/v1/pipelines/{id}",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 200, body = PipelineView), (status = 404, body = ErrorBody)))]
async fn get_pipeline(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<PipelineView>> {
    Ok(Json(state.manager.get(pipeline_id(&id)?).await?))
}

#[utoipa::path(post, path = "/api/v1/pipelines/{id}/stop",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 202, description = "stopping with a savepoint"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn stop_pipeline(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    state.manager.stop(pipeline_id(&id)?, false).await?;
    Ok(StatusCode::ACCEPTED)
}

#[utoipa::path(post, path = "/api/v1/pipelines/{id}/stop-now",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 204, description = "stopped, no savepoint"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn stop_pipeline_now(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    state.manager.stop(pipeline_id(&id)?, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/pipelines/{id}/resume",
    params(("id" = i64, Path, description = "the pipeline's id")), request_body = ResumeRequest,
    responses((status = 204, description = "running again"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn resume_pipeline(
    State(state): State<AppState>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let id = pipeline_id(&id)?;
    let request: ResumeRequest = match &bytes {
        Ok(b) if b.is_empty() => ResumeRequest::default(),
        _ => body(bytes)?,
    };
    if request.parallelism == Some(0) || request.parallelism.is_some_and(|p| p > 256) {
        return Err(ApiError::bad_request("'parallelism' must be from 1 to 256"));
    }
    state.manager.clone().resume(id, request.parallelism, request.checkpoint).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/api/v1/pipelines/{id}",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 204, description = "deleted with its checkpoints"), (status = 404, body = ErrorBody)))]
async fn delete_pipeline(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    state.manager.delete(pipeline_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/pipelines/{id}/checkpoints",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 200, description = "checkpoints: id, kind, status, start, duration, alignment, state and in-flight bytes"), (status = 404, body = ErrorBody)))]
async fn checkpoints(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let list = state.manager.checkpoints(pipeline_id(&id)?).await?;
    let summary: Vec<serde_json::Value> = list
        .into_iter()
        .map(|mut value| {
            if let Some(object) = value.as_object_mut() {
                object.remove("tasks");
            }
            value
        })
        .collect();
    Ok(Json(summary).into_response())
}

#[utoipa::path(get, path = "/api/v1/pipelines/{id}/checkpoints/{checkpoint}",
    params(("id" = i64, Path, description = "the pipeline's id"), ("checkpoint" = u64, Path, description = "the checkpoint's id")),
    responses((status = 200, description = "one checkpoint with its per-task breakdown"), (status = 404, body = ErrorBody)))]
async fn checkpoint(
    State(state): State<AppState>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> ApiResult<Response> {
    let list = state.manager.checkpoints(pipeline_id(&id)?).await?;
    let found = checkpoint.parse::<u64>().ok().and_then(|wanted| list.into_iter().find(|c| c["id"] == wanted));
    let found = found.ok_or_else(|| ApiError::not_found(format!("pipeline {id} has no checkpoint '{checkpoint}'")))?;
    Ok(Json(found).into_response())
}

#[utoipa::path(get, path = "/api/v1/pipelines/{id}/output",
    params(("id" = i64, Path, description = "the pipeline's id")),
    responses((status = 200, description = "Server-Sent Events: first a `schema` event (columns with their types, whether rows are changes, where each source starts reading), then one JSON object per row (with `_change` for updating results; `skipped` events count rows dropped before they were read), and an `end` event with the pipeline's final status once it has ended and every row was sent"), (status = 404, body = ErrorBody)))]
async fn output(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = pipeline_id(&id)?;
    let preview = state.manager.preview(id)?;
    let columns: Vec<serde_json::Value> =
        preview.columns.iter().map(|(name, data_type)| serde_json::json!({"name": name, "type": data_type})).collect();
    let schema = serde_json::json!({"columns": columns, "updating": preview.updating, "reading": preview.reading, "bounded": preview.bounded});
    let first = Event::default().event("schema").data(schema.to_string());
    let manager = state.manager.clone();
    let rows = futures::stream::unfold(Some(0usize), move |position| {
        let (manager, buffer) = (manager.clone(), preview.buffer.clone());
        async move {
            let position = position?;
            loop {
                // Whether it had ended before the rows are read: then no row can follow them.
                let ended = manager.ended(id);
                let (batches, next, skipped) = buffer.since(position);
                if next > position {
                    let mut events = Vec::new();
                    if skipped > 0 {
                        events.push(Event::default().event("skipped").data(skipped.to_string()));
                    }
                    events.extend(row_events(&batches));
                    return Some((events, Some(next)));
                }
                if let Some(status) = ended {
                    let end = serde_json::json!({"status": status, "rows": position});
                    return Some((vec![Event::default().event("end").data(end.to_string())], None));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    use futures::StreamExt;
    let events = futures::stream::once(async move { vec![first] })
        .chain(rows)
        .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// One SSE data event per row of `batches`, as a JSON object.
fn row_events(batches: &[datafusion::arrow::record_batch::RecordBatch]) -> Vec<Event> {
    let mut events = Vec::new();
    for batch in batches {
        let mut buffer = Vec::new();
        let mut writer = WriterBuilder::new().with_explicit_nulls(true).build::<_, LineDelimited>(&mut buffer);
        if writer.write(batch).and_then(|()| writer.finish()).is_err() {
            continue;
        }
        drop(writer);
        for line in String::from_utf8_lossy(&buffer).lines() {
            events.push(Event::default().data(line));
        }
    }
    events
}

#[utoipa::path(get, path = "/api/v1/tables", responses((status = 200, body = [TableView])))]
async fn tables(State(state): State<AppState>) -> Json<Vec<TableView>> {
    Json(state.manager.tables().await)
}

/// `GET /api/v1/connectors`: what a client completes and checks before the server does.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ConnectorsView {
    /// Each connector with the names of its options.
    connectors: Vec<ConnectorView>,
    /// The options `SET` takes for the next pipeline.
    pipeline_options: Vec<&'static str>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ConnectorView {
    name: &'static str,
    options: Vec<&'static str>,
}

#[utoipa::path(get, path = "/api/v1/connectors", responses((status = 200, body = ConnectorsView)))]
async fn connectors() -> Json<ConnectorsView> {
    let connectors = weir_connectors::Registry::built_in()
        .all()
        .map(|connector| ConnectorView {
            name: connector.name(),
            options: connector.options().iter().map(|o| o.name).collect(),
        })
        .collect();
    let pipeline_options = weir_sql::PIPELINE_OPTIONS.iter().map(|(name, _)| *name).collect();
    Json(ConnectorsView { connectors, pipeline_options })
}

async fn metrics(State(state): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], prometheus_text(&state.manager.live())).into_response()
}
