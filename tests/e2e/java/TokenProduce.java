// Kafka's own client with a delegation token (KIP-48): made by the user itself through AdminClient,
// optionally expired at once, then one record produced with it (SCRAM with tokenauth=true) to each
// bootstrap given. Used by tests/e2e/test_acl_parity.py (the sidecar relays the exchange to the backend).
// Usage: TokenProduce <backend> <user.properties> <client.properties> <topic> <expire:yes|no> <bootstrap>...
// (user.properties: SASL_SSL as the user, to make the token; client.properties: security settings without
// sasl.jaas.config.) Prints "RESULT <bootstrap> OK" or "RESULT <bootstrap> <exception class>: <message>".
import java.io.FileInputStream;
import java.io.IOException;
import java.util.Base64;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.DelegationTokenNotFoundException;
import org.apache.kafka.common.security.token.delegation.DelegationToken;

public class TokenProduce {
    static Properties load(String path) throws IOException {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(path)) {
            props.load(in);
        }
        return props;
    }

    public static void main(String[] args) throws Exception {
        Properties admin = load(args[1]);
        admin.put("bootstrap.servers", args[0]);
        DelegationToken token;
        try (Admin client = Admin.create(admin)) {
            token = client.createDelegationToken().delegationToken().get(30, TimeUnit.SECONDS);
            if (args[4].equals("yes")) {
                for (int attempt = 0; ; attempt++) {  // the token reaches the controller's cache a moment later
                    try {
                        client.expireDelegationToken(token.hmac(),
                                new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1)).expiryTimestamp()
                                .get(30, TimeUnit.SECONDS);
                        break;
                    } catch (java.util.concurrent.ExecutionException e) {
                        if (!(e.getCause() instanceof DelegationTokenNotFoundException) || attempt >= 20) {
                            throw e;
                        }
                        Thread.sleep(250);
                    }
                }
            }
        }
        Thread.sleep(1000);  // every broker learns the token (or its removal) from the metadata log
        String jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + token.tokenInfo().tokenId() + "\" password=\"" + Base64.getEncoder().encodeToString(token.hmac())
                + "\" tokenauth=\"true\";";
        for (int i = 5; i < args.length; i++) {
            Properties props = load(args[2]);
            props.put("bootstrap.servers", args[i]);
            props.put("sasl.jaas.config", jaas);
            props.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            props.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            props.put("max.block.ms", "15000");
            props.put("delivery.timeout.ms", "15000");
            props.put("request.timeout.ms", "10000");
            String result;
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
                producer.send(new ProducerRecord<>(args[3], "t".getBytes())).get(20, TimeUnit.SECONDS);
                result = "OK";
            } catch (Exception e) {
                Throwable cause = e.getCause() != null && e instanceof java.util.concurrent.ExecutionException
                        ? e.getCause() : e;
                result = cause.getClass().getSimpleName() + ": " + cause.getMessage();
            }
            System.out.println("RESULT " + args[i] + " " + result);
        }
    }
}
