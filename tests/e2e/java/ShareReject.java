// A Java KafkaShareConsumer (kafka-clients 4.x) with explicit acknowledgement, for the dead-letter
// scenario (docs/extensions.md): REJECTs records whose value starts with "rej-", ACCEPTs the rest.
// Usage: ShareReject <bootstrap> <group> <topic> <expected> <timeoutMs>
// Prints one line per record: "<offset> <ACCEPT|REJECT>", then "DONE <n>".
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;

public class ShareReject {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        int expected = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        int seen = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (seen < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = new String(r.value(), StandardCharsets.UTF_8);
                    AcknowledgeType type = value.startsWith("rej-") ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    consumer.acknowledge(r, type);
                    System.out.println(r.offset() + " " + type);
                    seen++;
                }
                consumer.commitSync();
            }
        }
        System.out.println("DONE " + seen);
    }
}
