//! The dataflow graph as data, for the web page to draw: operators with their parallelism and
//! the task (chain) each runs in, and edges with their partitioning. (`graph`, the EXPLAIN
//! text, is for people; this is for layout.)

use serde::Serialize;
use weir_engine::graph::NodeKind;
use weir_engine::{Graph, NodeId};

#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct Dataflow {
    pub nodes: Vec<DataflowNode>,
    pub edges: Vec<DataflowEdge>,
}

/// Where an operator stands in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    /// Reads rows in.
    Source,
    Operator,
    /// Has no outputs: where rows leave.
    Sink,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DataflowNode {
    pub id: usize,
    /// The operator's name, as its metrics (`operators[].operator`) carry it.
    pub name: String,
    pub role: NodeRole,
    pub parallelism: usize,
    /// The task (chain of operators fused into one) it runs in.
    pub task: usize,
    /// What state it keeps and when it lets it go; none if stateless.
    pub state: Option<String>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DataflowEdge {
    pub from: usize,
    pub to: usize,
    /// Which input of `to` (a join has two).
    pub input: usize,
    /// `forward`, `hash(keys)`, `broadcast` or `round-robin`.
    pub partitioning: String,
}

impl Dataflow {
    pub fn of(graph: &Graph, chaining: bool) -> Self {
        let chains = graph.chains(chaining);
        let task_of = |id: usize| chains.iter().position(|c| c.nodes.contains(&NodeId(id))).unwrap_or(0);
        let nodes = graph
            .nodes()
            .iter()
            .enumerate()
            .map(|(id, node)| DataflowNode {
                id,
                name: node.name.clone(),
                role: match node.kind {
                    NodeKind::Source(_) => NodeRole::Source,
                    NodeKind::Operator { .. } if graph.outgoing(NodeId(id)).next().is_none() => NodeRole::Sink,
                    NodeKind::Operator { .. } => NodeRole::Operator,
                },
                parallelism: node.parallelism,
                task: task_of(id),
                state: node.state.clone(),
            })
            .collect();
        let edges = graph
            .edges()
            .iter()
            .map(|e| DataflowEdge {
                from: e.from.0,
                to: e.to.0,
                input: e.input,
                partitioning: e.partitioning.to_string(),
            })
            .collect();
        Self { nodes, edges }
    }

    /// The names of the operators in `role`.
    pub fn names(&self, role: NodeRole) -> Vec<&str> {
        self.nodes.iter().filter(|n| n.role == role).map(|n| n.name.as_str()).collect()
    }
}
