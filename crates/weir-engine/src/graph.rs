//! The pipeline graph: operators with their parallelism, and the edges between them; and the
//! chains it runs as (operators fused into one task where nothing needs a channel).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::error::Result;
use crate::graph_err;
use crate::operator::{Operator, Source, SubtaskInfo};
use crate::partition::Partitioning;

/// Makes one subtask's source.
pub type SourceFactory = Arc<dyn Fn(&SubtaskInfo) -> Result<Box<dyn Source>> + Send + Sync>;
/// Makes one subtask's operator.
pub type OperatorFactory = Arc<dyn Fn(&SubtaskInfo) -> Result<Box<dyn Operator>> + Send + Sync>;

/// Index of a node in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

#[derive(Clone)]
pub enum NodeKind {
    Source(SourceFactory),
    Operator { inputs: usize, factory: OperatorFactory },
}

/// One operator of the graph.
#[derive(Clone)]
pub struct Node {
    pub name: String,
    pub parallelism: usize,
    pub kind: NodeKind,
    /// What state the node keeps and when it lets it go, for EXPLAIN; none if stateless.
    pub state: Option<String>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            NodeKind::Source(_) => "source".to_string(),
            NodeKind::Operator { inputs, .. } => format!("operator with {inputs} input(s)"),
        };
        write!(f, "{} ({kind}, parallelism {})", self.name, self.parallelism)
    }
}

/// Records flow from `from` into input `input` of `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    pub input: usize,
    pub partitioning: Partitioning,
}

/// A dataflow graph. Nodes are added sources first, then each operator after the nodes that
/// feed it, so the graph is acyclic by construction.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
}

/// Operators that run in one task: a head (with the chain's inputs) and the operators fused
/// after it, each fed by the one before over a forward edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub nodes: Vec<NodeId>,
    pub parallelism: usize,
}

impl Chain {
    pub fn head(&self) -> NodeId {
        self.nodes[0]
    }

    pub fn tail(&self) -> NodeId {
        self.nodes[self.nodes.len() - 1]
    }
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_source(&mut self, name: &str, parallelism: usize, factory: SourceFactory) -> NodeId {
        self.push(Node { name: name.to_string(), parallelism, kind: NodeKind::Source(factory), state: None })
    }

    pub fn add_operator(&mut self, name: &str, parallelism: usize, inputs: usize, factory: OperatorFactory) -> NodeId {
        self.push(Node {
            name: name.to_string(),
            parallelism,
            kind: NodeKind::Operator { inputs, factory },
            state: None,
        })
    }

    /// Says what state `node` keeps (shown by [`Graph::describe`]).
    pub fn describe_state(&mut self, node: NodeId, state: impl Into<String>) {
        if let Some(node) = self.nodes.get_mut(node.0) {
            node.state = Some(state.into());
        }
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() - 1)
    }

    pub fn connect(&mut self, from: NodeId, to: NodeId, input: usize, partitioning: Partitioning) {
        self.edges.push(Edge { from, to, input, partitioning });
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The edge into input `input` of `node`.
    pub fn input_edge(&self, node: NodeId, input: usize) -> Option<&Edge> {
        self.edges.iter().find(|e| e.to == node && e.input == input)
    }

    pub fn outgoing(&self, node: NodeId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == node)
    }

    /// The same graph with every node at `parallelism` (forward edges stay valid), for a
    /// restore at another parallelism.
    pub fn with_parallelism(&self, parallelism: usize) -> Graph {
        let mut graph = self.clone();
        for node in &mut graph.nodes {
            node.parallelism = parallelism;
        }
        graph
    }

    /// The parallelism of its widest operator.
    pub fn widest(&self) -> usize {
        self.nodes.iter().map(|n| n.parallelism).max().unwrap_or(1)
    }

    /// The graph an attempt runs: with no operator wider than `most` when set (narrower ones
    /// stay; a forward edge joins equal parallelisms, which stay equal), for an attempt that
    /// has fewer slots than the pipeline's parallelism; itself otherwise.
    pub fn capped(&self, most: Option<usize>) -> std::borrow::Cow<'_, Graph> {
        let Some(most) = most else { return std::borrow::Cow::Borrowed(self) };
        let mut graph = self.clone();
        for node in &mut graph.nodes {
            node.parallelism = node.parallelism.min(most.max(1));
        }
        std::borrow::Cow::Owned(graph)
    }

    /// Replaces the factory of operator `name` (same inputs), e.g. a test swapping a sink for
    /// a transactional one. False if there is no such operator.
    pub fn replace_operator(&mut self, name: &str, factory: OperatorFactory) -> bool {
        match self.nodes.iter_mut().find(|n| n.name == name) {
            Some(Node { kind: NodeKind::Operator { factory: old, .. }, .. }) => {
                *old = factory;
                true
            }
            _ => false,
        }
    }

    /// Checks what the runtime relies on, with a message that names the offending part.
    pub fn validate(&self) -> Result<()> {
        let mut seen = BTreeMap::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.name.is_empty() || !node.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return graph_err!("operator name '{}' must be non-empty ASCII letters, digits, '_' or '-'", node.name);
            }
            if seen.insert(node.name.as_str(), index).is_some() {
                return graph_err!("two operators are named '{}'", node.name);
            }
            if node.parallelism == 0 {
                return graph_err!("operator '{}' has parallelism 0", node.name);
            }
            let id = NodeId(index);
            match node.kind {
                NodeKind::Source(_) => {
                    if self.edges.iter().any(|e| e.to == id) {
                        return graph_err!("source '{}' cannot have an input", node.name);
                    }
                }
                NodeKind::Operator { inputs, .. } => {
                    if inputs == 0 {
                        return graph_err!("operator '{}' has no inputs", node.name);
                    }
                    for input in 0..inputs {
                        let count = self.edges.iter().filter(|e| e.to == id && e.input == input).count();
                        if count != 1 {
                            return graph_err!(
                                "input {input} of '{}' has {count} edges; it needs exactly one",
                                node.name
                            );
                        }
                    }
                }
            }
        }
        for edge in &self.edges {
            let (Some(from), Some(to)) = (self.nodes.get(edge.from.0), self.nodes.get(edge.to.0)) else {
                return graph_err!("an edge names a node that does not exist");
            };
            if edge.from.0 >= edge.to.0 {
                return graph_err!(
                    "edge {} -> {} goes backwards: add a node after the nodes feeding it",
                    from.name,
                    to.name
                );
            }
            if let NodeKind::Operator { inputs, .. } = to.kind
                && edge.input >= inputs
            {
                return graph_err!("edge {} -> {} names input {} of {inputs}", from.name, to.name, edge.input);
            }
            if edge.partitioning == Partitioning::Forward && from.parallelism != to.parallelism {
                return graph_err!(
                    "forward edge {} -> {} joins parallelism {} to {}; use hash or round-robin",
                    from.name,
                    to.name,
                    from.parallelism,
                    to.parallelism
                );
            }
            if let Partitioning::Hash(keys) = &edge.partitioning
                && keys.is_empty()
            {
                return graph_err!("hash edge {} -> {} has no key columns", from.name, to.name);
            }
        }
        Ok(())
    }

    /// The chains the graph runs as. With `chaining`, an operator joins the chain of the node
    /// feeding it when that is its only input, over a forward edge, and the feeding node has no
    /// other output.
    pub fn chains(&self, chaining: bool) -> Vec<Chain> {
        let mut chain_of: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut chains: Vec<Chain> = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            let id = NodeId(index);
            let fused_into = match node.kind {
                NodeKind::Operator { inputs: 1, .. } if chaining => self
                    .input_edge(id, 0)
                    .filter(|e| e.partitioning == Partitioning::Forward && self.outgoing(e.from).count() == 1)
                    .and_then(|e| chain_of[e.from.0])
                    .filter(|&c| chains[c].tail() == self.input_edge(id, 0).map_or(id, |e| e.from)),
                _ => None,
            };
            match fused_into {
                Some(c) => {
                    chains[c].nodes.push(id);
                    chain_of[index] = Some(c);
                }
                None => {
                    chains.push(Chain { nodes: vec![id], parallelism: node.parallelism });
                    chain_of[index] = Some(chains.len() - 1);
                }
            }
        }
        chains
    }

    /// A readable description: chains (tasks), operators with parallelism, edges.
    pub fn describe(&self, chaining: bool) -> String {
        let mut text = String::new();
        for chain in self.chains(chaining) {
            let names: Vec<&str> = chain.nodes.iter().map(|id| self.node(*id).name.as_str()).collect();
            let _ = writeln!(text, "task [{}] x{}", names.join(" -> "), chain.parallelism);
        }
        for edge in &self.edges {
            let _ = writeln!(
                text,
                "edge {} -> {} (input {}): {}",
                self.node(edge.from).name,
                self.node(edge.to).name,
                edge.input,
                edge.partitioning
            );
        }
        for node in &self.nodes {
            if let Some(state) = &node.state {
                let _ = writeln!(text, "state {}: {state}", node.name);
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use datafusion::arrow::record_batch::RecordBatch;

    use super::*;
    use crate::operator::{Collector, SourceEvent};

    struct Nothing;

    #[async_trait]
    impl Source for Nothing {
        async fn next(&mut self) -> Result<SourceEvent> {
            Ok(SourceEvent::End)
        }
    }

    #[async_trait]
    impl Operator for Nothing {
        async fn process_batch(&mut self, _: usize, _: RecordBatch, _: &mut Collector) -> Result<()> {
            Ok(())
        }
    }

    fn source(graph: &mut Graph, name: &str, parallelism: usize) -> NodeId {
        graph.add_source(name, parallelism, Arc::new(|_| Ok(Box::new(Nothing))))
    }

    fn operator(graph: &mut Graph, name: &str, parallelism: usize, inputs: usize) -> NodeId {
        graph.add_operator(name, parallelism, inputs, Arc::new(|_| Ok(Box::new(Nothing))))
    }

    fn names(graph: &Graph, chaining: bool) -> Vec<Vec<String>> {
        graph.chains(chaining).iter().map(|c| c.nodes.iter().map(|n| graph.node(*n).name.clone()).collect()).collect()
    }

    #[test]
    fn forward_edges_of_equal_parallelism_are_fused_into_one_task() {
        let mut graph = Graph::new();
        let s = source(&mut graph, "source", 2);
        let filter = operator(&mut graph, "filter", 2, 1);
        let project = operator(&mut graph, "project", 2, 1);
        let count = operator(&mut graph, "count", 2, 1);
        let sink = operator(&mut graph, "sink", 2, 1);
        graph.connect(s, filter, 0, Partitioning::Forward);
        graph.connect(filter, project, 0, Partitioning::Forward);
        graph.connect(project, count, 0, Partitioning::Hash(vec!["k".into()]));
        graph.connect(count, sink, 0, Partitioning::Forward);
        graph.validate().unwrap();
        assert_eq!(names(&graph, true), vec![vec!["source", "filter", "project"], vec!["count", "sink"]]);
        assert_eq!(names(&graph, false).len(), 5);
    }

    #[test]
    fn a_node_with_two_outputs_or_an_operator_with_two_inputs_is_not_fused() {
        let mut graph = Graph::new();
        let a = source(&mut graph, "a", 1);
        let b = source(&mut graph, "b", 1);
        let join = operator(&mut graph, "join", 1, 2);
        let left = operator(&mut graph, "left", 1, 1);
        let right = operator(&mut graph, "right", 1, 1);
        graph.connect(a, join, 0, Partitioning::Forward);
        graph.connect(b, join, 1, Partitioning::Forward);
        graph.connect(join, left, 0, Partitioning::Forward);
        graph.connect(join, right, 0, Partitioning::Forward);
        graph.validate().unwrap();
        assert_eq!(names(&graph, true).len(), 5);
    }

    #[test]
    fn invalid_graphs_are_refused_with_the_reason() {
        let mut graph = Graph::new();
        let s = source(&mut graph, "source", 2);
        let sink = operator(&mut graph, "sink", 3, 1);
        graph.connect(s, sink, 0, Partitioning::Forward);
        let error = graph.validate().unwrap_err().to_string();
        assert!(error.contains("forward edge source -> sink joins parallelism 2 to 3"), "{error}");

        let mut graph = Graph::new();
        source(&mut graph, "same", 1);
        source(&mut graph, "same", 1);
        assert!(graph.validate().unwrap_err().to_string().contains("two operators are named 'same'"));

        let mut graph = Graph::new();
        let s = source(&mut graph, "source", 1);
        operator(&mut graph, "two", 1, 2);
        graph.connect(s, NodeId(1), 0, Partitioning::Forward);
        assert!(graph.validate().unwrap_err().to_string().contains("input 1 of 'two' has 0 edges"));

        let mut graph = Graph::new();
        source(&mut graph, "bad name", 1);
        assert!(graph.validate().unwrap_err().to_string().contains("'bad name'"));
    }
}
