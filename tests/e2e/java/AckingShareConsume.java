// A Java KafkaShareConsumer (kafka-clients 4.x) that accepts every record explicitly and reports
// each acknowledgement's outcome, for the cluster-of-sidecars e2e test (tests/e2e/test_sidecar_cluster.py).
// Usage: AckingShareConsume <bootstrap> <group> <topic> <idleMs> <maxMs> [workMicrosPerRecord]
// Prints "rec <partition> <offset> <deliveryCount> <epochMillis>" per record and
// "ack <partition> <offset> <deliveryCount> <ok 0|1> <epochMillis>" per acknowledgement, then "DONE".
// Stops after idleMs without records (once it has received some, or after 30 s without any), or maxMs.
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;

public class AckingShareConsume {
    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        long idleMs = Long.parseLong(args[3]);
        long start = System.currentTimeMillis();
        long deadline = start + Long.parseLong(args[4]);
        long last = start + 30_000 - idleMs;
        long workNanos = args.length > 5 ? Long.parseLong(args[5]) * 1000 : 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (System.currentTimeMillis() < deadline && System.currentTimeMillis() - last < idleMs) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    System.out.println("rec " + r.partition() + " " + r.offset() + " "
                            + r.deliveryCount().orElse((short) -1) + " " + System.currentTimeMillis());
                    if (workNanos > 0) {
                        Thread.sleep(workNanos / 1_000_000, (int) (workNanos % 1_000_000));
                    }
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    batch.add(r);
                }
                if (batch.isEmpty()) {
                    continue;
                }
                last = System.currentTimeMillis();
                Map<TopicIdPartition, Optional<KafkaException>> results;
                try {
                    results = consumer.commitSync(Duration.ofSeconds(30));
                } catch (KafkaException e) {
                    results = Map.of();
                    System.err.println("commitSync: " + e);
                }
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    boolean ok = false;
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : results.entrySet()) {
                        if (e.getKey().partition() == r.partition() && e.getKey().topic().equals(r.topic())) {
                            ok = e.getValue().isEmpty();
                        }
                    }
                    System.out.println("ack " + r.partition() + " " + r.offset() + " "
                            + r.deliveryCount().orElse((short) -1) + " " + (ok ? 1 : 0) + " " + System.currentTimeMillis());
                }
            }
        }
        System.out.println("DONE");
    }
}
