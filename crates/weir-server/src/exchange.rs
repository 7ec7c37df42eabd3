//! Channels between subtasks on different workers, over Arrow Flight.
//!
//! One `do_exchange` call per channel, opened by the sending worker to the receiving one; its
//! first message names the channel ([`weir_engine::remote::ChannelKey`]). Each message after
//! it is one of the channel's messages: a batch as Arrow IPC in the body, or a watermark, a
//! barrier or the end as the message's `app_metadata` alone, in the order the sending task
//! queued them. The receiver answers with credits, in batches: as many as its queue holds at
//! first, then one for each batch its task takes, and the sender sends a batch only against a
//! credit. So a slow receiver holds the sender's queue full, and the sending task stops
//! reading its own input, as with a local channel; control messages need no credit, and a
//! barrier put at the head of the sender's queue (unaligned) goes out next, behind only the
//! batches already credited.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_flight::{FlightData, FlightDescriptor};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use futures::Stream;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};
use tonic::{Status, Streaming};
use weir_engine::channel::{Receiver, Sender};
use weir_engine::remote::{ChannelKey, Exchange};
use weir_engine::{Barrier, Message};

use crate::flight_client::{FlightClients, first_command, message_of, read_message};

/// How long a receiving worker waits for its side of a channel to be set up (its part of the
/// attempt may start after the sender's).
const EXPECT_WITHIN: Duration = Duration::from_secs(60);

/// The header of one message on a channel's stream.
#[derive(Debug, Serialize, Deserialize)]
enum Frame {
    /// A batch, in the body.
    Data,
    Watermark(i64),
    Barrier(Barrier),
    End,
    /// From the receiver: this many more batches may be sent.
    Credit(u64),
}

/// What a `do_exchange` call's first message asks for.
#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    /// Carries one channel's messages to this worker.
    Channel(ChannelKey),
    /// Runs a part of a pipeline attempt here (controller to worker).
    Attempt(Box<crate::placement::AttemptOpen>),
}

impl Command {
    pub fn descriptor(&self) -> Result<FlightDescriptor, Status> {
        let json = serde_json::to_vec(self).map_err(|e| Status::internal(e.to_string()))?;
        Ok(FlightDescriptor::new_cmd(json))
    }
}

fn frame_of(data: &FlightData) -> Result<Frame, String> {
    read_message(data).map_err(|e| format!("a channel message's header: {e}"))
}

/// `message` as one Flight message. A batch goes as an Arrow IPC stream of its own (schema,
/// dictionaries, batch): a channel's batches need not share a schema's metadata, and the
/// receiver needs no state to read one.
fn encode(message: Message) -> Result<FlightData, String> {
    let frame = match message {
        Message::Data(batch) => {
            let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(|e| e.to_string())?;
            writer.write(&batch).map_err(|e| e.to_string())?;
            let body = writer.into_inner().map_err(|e| e.to_string())?;
            let mut data = message_of(&Frame::Data)?;
            data.data_body = body.into();
            return Ok(data);
        }
        Message::Watermark(at) => Frame::Watermark(at),
        Message::Barrier(barrier) => Frame::Barrier(barrier),
        Message::End => Frame::End,
    };
    message_of(&frame)
}

fn decode(data: FlightData) -> Result<Message, String> {
    Ok(match frame_of(&data)? {
        Frame::Data => {
            let mut reader = StreamReader::try_new(Cursor::new(data.data_body), None).map_err(|e| e.to_string())?;
            let batch: RecordBatch =
                reader.next().ok_or("a data message without a batch")?.map_err(|e| e.to_string())?;
            Message::Data(batch)
        }
        Frame::Watermark(at) => Message::Watermark(at),
        Frame::Barrier(barrier) => Message::Barrier(barrier),
        Frame::End => Message::End,
        Frame::Credit(_) => return Err("a credit on the data stream".into()),
    })
}

/// A receiving end set up by an attempt, waiting for its sender to call.
struct Expected {
    into: Sender,
    wakeup: Arc<Notify>,
    credits: usize,
    failed: Box<dyn FnOnce(String) + Send>,
}

/// The Flight side of a worker's channels: it opens the calls of the channels whose sender
/// runs here, and takes the calls of those whose receiver does.
pub struct FlightExchange {
    clients: FlightClients,
    expected: Mutex<HashMap<ChannelKey, Expected>>,
    arrived: Notify,
}

impl FlightExchange {
    pub fn new(clients: FlightClients) -> Arc<Self> {
        Arc::new(Self { clients, expected: Mutex::default(), arrived: Notify::new() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChannelKey, Expected>> {
        self.expected.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a sender's call for `key`: waits for the attempt here to expect it, then puts
    /// what arrives into the receiving task's queue and answers with credits.
    pub async fn accept(
        self: Arc<Self>,
        key: ChannelKey,
        mut incoming: Streaming<FlightData>,
    ) -> Result<impl Stream<Item = Result<FlightData, Status>> + Send + 'static, Status> {
        let deadline = tokio::time::Instant::now() + EXPECT_WITHIN;
        let expected = loop {
            let arrived = self.arrived.notified();
            if let Some(expected) = self.lock().remove(&key) {
                break expected;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(Status::not_found(format!("no attempt here expects channel {key:?}")));
            }
        };
        let (credits_tx, credits_rx) = mpsc::channel::<Result<FlightData, Status>>(16);
        tokio::spawn(async move {
            let Expected { into, wakeup, credits, failed } = expected;
            let capacity = credits as u64;
            let (mut granted, mut received) = (capacity, 0u64);
            let grant = |n: u64| message_of(&Frame::Credit(n)).map_err(Status::internal);
            if credits_tx.send(grant(capacity)).await.is_err() {
                return;
            }
            loop {
                tokio::select! {
                    message = incoming.message() => {
                        let message = match message {
                            Ok(Some(data)) => decode(data),
                            Ok(None) => Err("the sending worker closed the channel before its end".into()),
                            Err(status) => Err(format!("the sending worker's stream broke: {}", status.message())),
                        };
                        match message {
                            Ok(message) => {
                                let end = matches!(message, Message::End);
                                received += u64::from(matches!(message, Message::Data(_)));
                                into.push_granted(message);
                                if end {
                                    return;
                                }
                            }
                            Err(why) => {
                                failed(format!("the channel {key}: {why}"));
                                return;
                            }
                        }
                    }
                    _ = wakeup.notified() => {
                        // The task took batches: grant the room it made.
                        let queued = into.metrics().queued_batches.load(std::sync::atomic::Ordering::Relaxed);
                        let outstanding = granted.saturating_sub(received);
                        let more = capacity.saturating_sub(queued + outstanding);
                        if more > 0 {
                            granted += more;
                            if credits_tx.send(grant(more)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        Ok(crate::flight_client::stream_of(credits_rx))
    }
}

impl Exchange for FlightExchange {
    fn send(
        &self,
        key: ChannelKey,
        address: String,
        from: Receiver,
        wakeup: Arc<Notify>,
    ) -> BoxFuture<'static, weir_engine::Result<()>> {
        let clients = self.clients.clone();
        Box::pin(async move {
            send(clients, key.clone(), &address, from, wakeup).await.map_err(|why| {
                weir_engine::Error::Stopped(format!("the channel {key} to the worker at {address}: {why}"))
            })
        })
    }

    fn receive(
        &self,
        key: ChannelKey,
        into: Sender,
        wakeup: Arc<Notify>,
        credits: usize,
        failed: Box<dyn FnOnce(String) + Send>,
    ) {
        self.lock().insert(key, Expected { into, wakeup, credits, failed });
        self.arrived.notify_waiters();
    }

    fn forget(&self, attempt: &str) {
        self.lock().retain(|key, _| key.attempt != attempt);
    }
}

/// The sending side of one channel: drains `from` onto a call to the receiving worker, data
/// only against credits, until the channel's end is sent and the receiver has closed, or the
/// sending task stopped without an end (a shutdown: the attempt is over, the call is closed).
async fn send(
    clients: FlightClients,
    key: ChannelKey,
    address: &str,
    from: Receiver,
    wakeup: Arc<Notify>,
) -> Result<(), String> {
    let mut client = clients.connect(address).await?;
    let (out, out_rx) = mpsc::channel::<FlightData>(4);
    let descriptor = Command::Channel(key).descriptor().map_err(|s| s.message().to_string())?;
    out.send(first_command(descriptor)).await.map_err(|_| "the call closed")?;
    let mut credits_in = client
        .do_exchange(crate::flight_client::stream_of(out_rx))
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner();
    let mut credits = 0u64;
    loop {
        while let Some(message) = from.pop_sendable(credits > 0) {
            let end = matches!(message, Message::End);
            credits -= u64::from(matches!(message, Message::Data(_)));
            out.send(encode(message)?).await.map_err(|_| "the receiving worker closed the channel")?;
            if end {
                drop(out);
                // The receiver closes once it has the end: everything was delivered.
                while let Ok(Some(_)) = credits_in.message().await {}
                return Ok(());
            }
        }
        if from.abandoned() {
            return Ok(());
        }
        tokio::select! {
            _ = wakeup.notified() => {}
            answer = credits_in.message() => match answer {
                Ok(Some(data)) => match frame_of(&data)? {
                    Frame::Credit(n) => credits += n,
                    other => return Err(format!("the receiver sent {other:?}, not a credit")),
                },
                Ok(None) => return Err("the receiving worker closed the channel".into()),
                Err(status) => return Err(status.message().to_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests;
